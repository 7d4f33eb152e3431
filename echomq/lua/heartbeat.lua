--[[ heartbeat: a worker says it is alive until server now + its lapse.

  A worker that holds jobs gets the short lapse: if it dies, its jobs come back soon
  after. A worker that holds none (its job set is empty) gets the idle lapse: nothing of
  anyone waits on its death, so it may beat rarely. A claim moves a registered worker's
  deadline back to now + lapse (lease_all), so a worker is never busy on the long one.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  worker   hash   the worker's self-description
  KEYS[3]  held     set    the jobs it holds (wjobs:<worker id>)
  KEYS[4..] the static keys below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  worker id
  ARGV[2]  lapse_ms       while it holds jobs: after this long without a beat the reaper
                          reclaims them
  ARGV[3]  ttl_ms         how long the description outlives the last beat
  ARGV[4]  idle_lapse_ms  while it holds none (>= lapse_ms)
  ARGV[5]  gap_ms         outage detection (0 = off, include/pulse.lua): the beat adds
                          itself to the queue's pulse, and the first beat after a gap
                          longer than gap_ms gives every holder lapse_ms from now (a beat
                          landing first after a freeze must not hide the freeze from
                          the reaper, whose call may come right after it)
  ARGV[6]  events_maxlen
  ARGV[7..] field, value pairs (pid, host, …), stored on the worker hash

  Returns  {server now (ms), the lapse applied (ms)}
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_ACTIVE, K_COUNTERS, K_EVENTS, K_WORKERS, K_SWEPT = unpack(KEYS, 4, 8)
--@include common
--@include pulse

local now = server_now()
local gap = tonumber(ARGV[5] or '0') or 0
if gap > 0 then
  pulse(now, gap, tonumber(ARGV[2]), ARGV[6], ARGV[1])
end
local lapse = ARGV[2]
if redis.call('EXISTS', KEYS[3]) == 0 then
  lapse = ARGV[4]
end
redis.call('ZADD', K_WORKERS, now + tonumber(lapse), ARGV[1])
redis.call('HSET', KEYS[2], 'beat', now, 'lapse_ms', ARGV[2])
redis.call('HDEL', KEYS[2], 'lapsed', 'stopped')
if #ARGV > 6 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 7))
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {now, tonumber(lapse)}
