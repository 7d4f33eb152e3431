--[[ discard: an operator deletes a dead job for good.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash

  ARGV[1]  job id

  Returns  1 deleted | -1 no such job | -2 not dead
]]
--@include common

local state = redis.call('HGET', KEYS[2], 'state')
if not state then return -1 end
if state ~= 'dead' then return -2 end
redis.call('ZREM', K_DEAD, ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', K_COUNTERS, 'discarded', 1)
return 1
