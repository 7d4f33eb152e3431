--[[ schedule_tick: fire a schedule's due tick and advance its next due time, atomically.

  The tick is this one script: it checks the schedule's next due time against the server
  clock, enqueues the tick's job (plain, or onto the schedule's lane) with the tick's time
  on its row (`tick`, JobInfo.scheduled_for_ms), and stores the next due time. A caller
  that read an older due time (another scheduler fired it meanwhile) changes nothing, so
  however many schedulers race, and whichever dies mid-call, a tick fires once.

  Missed ticks (the tick after this one is already due: no scheduler ran for a period):
    skip          every due tick is dropped, counted in `missed`; the next tick is the
                  first one after now
    catch_up_one  one job fires, for this (the oldest due) tick; the later due ticks are
                  counted in `missed`; the next tick is the first one after now

  KEYS[1]  prefix    "emq:{q}:"
  KEYS[2]  schedule  hash   the schedule's row (schedule_add.lua)
  KEYS[3]  job       hash   the tick's job row: its id is derived from (schedule, tick)
  KEYS[4..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  name
  ARGV[2]  due         the next due time the caller read (schedule_due.lua)
  ARGV[3]  job id      derived from (name, due)
  ARGV[4]  after       cron only: the tick after `due` (0 for every_ms: due + every)
  ARGV[5]  upcoming    cron only: the first tick after the caller's server now
  ARGV[6]  between     cron only: the ticks from `after` up to, not including, `upcoming`

  Returns {1, next} fired | {2, next} all due ticks skipped (missed) |
          {0, next} stale or not due: nothing changed | {-1, 0} no such schedule or paused
]]
local K_NEW, K_PENDING, K_COUNTERS, K_WAKE, K_INLANES, K_FOREIGN, K_SCHEDULES = unpack(KEYS, 4, 10)
--@include common

local sk = KEYS[2]
local s = redis.call('HMGET', sk, 'next', 'every', 'lane', 'body', 'policy', 'paused', 'max')
if not s[1] or s[6] == '1' then
  return {-1, 0}
end
local due = tonumber(s[1])
local now = server_now()
if due ~= tonumber(ARGV[2]) or now < due then
  return {0, due}
end

local every = tonumber(s[2])
local after, upcoming, between
if every > 0 then
  after = due + every
  upcoming = due + every * (math.floor((now - due) / every) + 1)
  between = (upcoming - after) / every
else
  after, upcoming, between = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
  if after <= due then
    return redis.error_reply('ERR schedule_tick: the next tick must be after the due one')
  end
  if upcoming < after then
    upcoming, between = after, 0
  end
end

local fire, nxt, missed = true, after, 0
if now >= after then
  nxt = upcoming
  if s[5] == 'skip' then
    fire, missed = false, between + 1
  else
    missed = between
  end
end

if fire and redis.call('EXISTS', KEYS[3]) == 0 then
  local row = {'body', s[4], 'enq', now, 'tick', due}
  if s[3] ~= '' then
    put(row, 'lane', s[3])
  end
  if tonumber(s[7]) ~= DEFAULT_MAX_ATTEMPTS then
    put(row, 'max', s[7])
  end
  redis.call('HSET', KEYS[3], unpack(row))
  redis.call('HINCRBY', K_COUNTERS, 'enqueued', 1)
  place(ARGV[3], s[3], true, false, 0)  -- priority 0: no row read for it
end
redis.call('HSET', sk, 'next', nxt)
if fire then
  redis.call('HINCRBY', sk, 'fired', 1)
end
if missed > 0 then
  redis.call('HINCRBY', sk, 'missed', missed)
end
redis.call('ZADD', K_SCHEDULES, nxt, ARGV[1])
if fire then
  return {1, nxt}
end
return {2, nxt}
