--[[ retry_dead: an operator sends a dead job back to its lane with fresh deliveries.

  failures and stalls restart from 0; attempts (the fencing token) is kept, it never
  decreases. The last error is kept for the record.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash

  ARGV[1]  job id

  Returns  1 back on its lane | -1 no such job | -2 not dead
]]
--@include common

local id = ARGV[1]
local jk = KEYS[2]
local row = redis.call('HMGET', jk, 'state', 'lane')
if not row[1] then return -1 end
if row[1] ~= 'dead' then return -2 end
redis.call('ZREM', K_DEAD, id)
redis.call('HDEL', jk, 'failures', 'stalls', 'reason', 'done')  -- counts restart at 0
if row[2] and row[2] ~= '' then
  redis.call('ZADD', open_key(load_of(jk, row[2])), redis.call('HGET', jk, 'enq') or 0, id)
end
redis.call('HINCRBY', K_COUNTERS, 'retried', 1)
place(id, row[2])
return 1
