--[[ schedule_pause: a schedule stops ticking until resumed (or added again).

  KEYS[1]  prefix    "emq:{q}:"
  KEYS[2]  schedule  hash   the schedule's row
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  name

  Returns 1 paused now, 0 already paused, -1 no such schedule.
]]
local K_SCHEDULES = KEYS[3]

local paused = redis.call('HGET', KEYS[2], 'paused')
if not paused then
  return -1
end
if paused == '1' then
  return 0
end
redis.call('HSET', KEYS[2], 'paused', '1')
-- Scored +inf: never the earliest due, still listed.
redis.call('ZADD', K_SCHEDULES, 'inf', ARGV[1])
return 1
