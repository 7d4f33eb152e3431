--[[ discard: an operator deletes a dead job for good.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  job id

  Returns  1 deleted | -1 no such job | -2 not dead
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_DEAD, K_COUNTERS = unpack(KEYS, 3, 4)
--@include common

local state = redis.call('HGET', KEYS[2], 'state')
if not state and redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
if state ~= 'dead' then return -2 end  -- no state: pending
redis.call('ZREM', K_DEAD, ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('HINCRBY', K_COUNTERS, 'discarded', 1)
return 1
