--[[ schedule_remove: a schedule is gone; jobs it already enqueued stay.

  KEYS[1]  prefix    "emq:{q}:"
  KEYS[2]  schedule  hash   the schedule's row
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  name

  Returns 1 removed, 0 no such schedule.
]]
local K_SCHEDULES = KEYS[3]

redis.call('ZREM', K_SCHEDULES, ARGV[1])
return redis.call('DEL', KEYS[2])
