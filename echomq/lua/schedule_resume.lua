--[[ schedule_resume: a paused schedule ticks again, its next tick due at ARGV[2].

  KEYS[1]  prefix    "emq:{q}:"
  KEYS[2]  schedule  hash   the schedule's row
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  name
  ARGV[2]  next due    epoch ms; 0 = server now + the schedule's every_ms

  Ticks due while it was paused are neither fired nor counted missed: a pause is asked for.
  Returns the next due time, -1 for no such schedule, -2 when it was not paused (unchanged).
]]
local K_SCHEDULES, K_SCHEDWAKE = unpack(KEYS, 3, 4)
--@include common

local row = redis.call('HMGET', KEYS[2], 'paused', 'every')
if not row[1] then
  return -1
end
if row[1] ~= '1' then
  return -2
end
local nxt = tonumber(ARGV[2])
if nxt == 0 then
  nxt = server_now() + tonumber(row[2])
end
redis.call('HSET', KEYS[2], 'next', nxt, 'paused', '0')
redis.call('ZADD', K_SCHEDULES, nxt, ARGV[1])
if redis.call('LLEN', K_SCHEDWAKE) == 0 then
  redis.call('RPUSH', K_SCHEDWAKE, '1')
end
return nxt
