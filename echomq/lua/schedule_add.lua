--[[ schedule_add: create or replace a schedule; its first tick is due at ARGV[7].

  KEYS[1]  prefix    "emq:{q}:"
  KEYS[2]  schedule  hash   the schedule's row
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  name
  ARGV[2]  payload       the body of every tick's job
  ARGV[3]  every_ms      > 0: a tick every every_ms; 0: a cron schedule
  ARGV[4]  cron          the expression ('' for every_ms); evaluated in Python
  ARGV[5]  lane          '' = the plain queue
  ARGV[6]  missed        'skip' | 'catch_up_one'
  ARGV[7]  first due     epoch ms; 0 = server now + every_ms
  ARGV[8]  max_attempts

  A replaced schedule starts afresh (its counts kept): paused no longer, first tick at
  ARGV[7]. Returns the first due time.
]]
local K_SCHEDULES, K_SCHEDWAKE = unpack(KEYS, 3, 4)
--@include common

local first = tonumber(ARGV[7])
if first == 0 then
  first = server_now() + tonumber(ARGV[3])
end
redis.call('HSET', KEYS[2], 'body', ARGV[2], 'every', ARGV[3], 'cron', ARGV[4],
  'lane', ARGV[5], 'policy', ARGV[6], 'max', ARGV[8], 'next', first, 'paused', '0')
redis.call('ZADD', K_SCHEDULES, first, ARGV[1])
-- A scheduler waiting for a later tick must shorten its wait: one token, as wake() keeps.
if redis.call('LLEN', K_SCHEDWAKE) == 0 then
  redis.call('RPUSH', K_SCHEDWAKE, '1')
end
return first
