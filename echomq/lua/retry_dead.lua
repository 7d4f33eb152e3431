--[[ retry_dead: an operator sends a dead job back to its lane with fresh deliveries.

  failures and stalls restart from 0; attempts (the fencing token) is kept, it never
  decreases. The last error is kept for the record.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  job id

  Returns  1 back on its lane | -1 no such job | -2 not dead
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_PENDING, K_DEAD, K_COUNTERS, K_WAKE, K_INLANES, K_FOREIGN = unpack(KEYS, 3, 9)
--@include common

local id = ARGV[1]
local jk = KEYS[2]
local row = redis.call('HMGET', jk, 'state', 'lane', 'load')
if not row[1] and redis.call('EXISTS', jk) == 0 then return -1 end
if row[1] ~= 'dead' then return -2 end  -- no state: pending
redis.call('ZREM', K_DEAD, id)
redis.call('HDEL', jk, 'failures', 'stalls', 'reason', 'done')  -- counts restart at 0
if row[2] and row[2] ~= '' and row[3] then
  -- counted against another subject: back in its open index (a job of its lane's own is
  -- counted by the lane it goes back to)
  redis.call('ZADD', open_key(row[3]), redis.call('HGET', jk, 'enq') or 0, id)
end
redis.call('HINCRBY', K_COUNTERS, 'retried', 1)
place(id, row[2], false, row[3])
return 1
