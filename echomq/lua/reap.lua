--[[ reap: return presumed-dead holders' jobs to their lanes (Stalled.reap).

  Two ways a holder is presumed dead, both judged on the server clock:
    * its lease deadline passed (the floor: works even without heartbeats);
    * its worker's heartbeat deadline passed (early: a killed worker's jobs come back
      after the heartbeat lapse, not after the whole lease). Fencing keeps this safe:
      a holder that was only slow finds its token stale.
  Also promotes due scheduled jobs, so retries flow even when no consumer claims.

  With a reaper id (ARGV[3]) the call first takes or renews the queue's reaper lock
  (SET NX PX): one reaper per queue, whatever the number of consumer processes. A caller
  that does not hold the lock reaps nothing (it only adds its call to the queue's pulse,
  below) and learns when to call again: when the lock may free up; the
  holder learns how long nothing can come due, so an idle queue is reaped rarely.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  limit          at most this many expired leases, and this many lapsed workers
  ARGV[2]  events_maxlen
  ARGV[3]  reaper id      '' = reap unconditionally (no lock)
  ARGV[4]  lock_ms        how long the lock outlives this call
  ARGV[5]  horizon_ms     the longest wait reported: a job claimed after this call can
                          come due no sooner than its holder's heartbeat lapse
  ARGV[6]  margin_ms      unused (kept for the argument layout)
  ARGV[7]  gap_ms         outage detection (0 = off): include/pulse.lua. Every call
                          records the server time it ran at, a non-holder's too, and
                          the first beat or call after a gap longer than gap_ms gives
                          every holder horizon_ms from now before anyone is judged.
                          While anything is active, every caller is told to call again
                          within gap_ms / 2, so a live queue never leaves such a gap.

  Why this is sound: a worker is reaped only when its deadline passed and no gap longer
  than gap_ms (< lapse - heartbeat) came since its last beat, or a full horizon of running
  time passed after the last such gap. Its next beat was due within a heartbeat of the
  last one; with no long gap the server took commands all along, so the beat would have
  landed before the deadline (a freeze <= gap_ms leaves lapse - heartbeat - gap_ms of
  slack for the burst of queued commands); after a long gap, every holder's queued or
  retried beat has a whole lapse to land. So a worker whose beats stopped is dead or
  frozen itself, never the victim of the server's own silence.

  Returns  {leader, wait_ms, moved id...}
             leader   1 reaped (the lock is ours, or no lock asked) | 0 another reaper
                      holds the lock: nothing reaped
             wait_ms  leader: until the earliest lease deadline, heartbeat deadline or due
                      time (at most horizon_ms, at least 0); else the lock's remaining time;
                      either at most gap_ms / 2 while anything is active
           then the ids moved (to their lane, or to dead when out of deliveries)
  Events   reaped {job_id, lane, why}; dead {job_id, lane, reason} when out of deliveries;
           outage {quiet_ms} when a call finds one (counter `outages`)
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_PENDING, K_ACTIVE, K_SCHEDULED, K_DEAD, K_COUNTERS, K_EVENTS, K_WAKE, K_WORKERS, K_INLANES, K_SWEPT, K_REAPER, K_FOREIGN = unpack(KEYS, 2, 14)
--@include common
--@include pulse

local limit, maxlen = tonumber(ARGV[1]), ARGV[2]
local reaper = ARGV[3] or ''
local horizon, gap = tonumber(ARGV[5] or '0'), tonumber(ARGV[7] or '0')
local now = server_now()
if gap > 0 then
  pulse(now, gap, horizon, maxlen, reaper)
end
-- While anything is active, no caller waits longer than gap / 2: the pulse stays dense
-- enough that only an outage leaves a gap (the reaper, and those waiting to take over).
local beat_ms = nil
if gap > 0 and redis.call('ZCARD', K_ACTIVE) > 0 then
  beat_ms = math.max(1, math.floor(gap / 2))
end
if reaper ~= '' then
  local holder = redis.call('GET', K_REAPER)
  if holder and holder ~= reaper then
    local ttl = math.max(0, redis.call('PTTL', K_REAPER))
    if beat_ms then ttl = math.min(ttl, beat_ms) end
    return {0, ttl}
  end
  redis.call('SET', K_REAPER, reaper, 'PX', ARGV[4])
end

promote(now, limit)

-- A lease renewed every third of itself leaves less slack than the heartbeat's (lapse -
-- beat) when it is short: a freeze shorter than gap_ms, so no outage, can carry its
-- deadline past before the renewal queued behind the freeze lands. So with outage
-- detection on, a lease whose holder still beats waits up to a horizon (one lapse) past
-- its deadline: it then has at least the heartbeat's slack, whatever its length, and a
-- holder that died is reaped at its heartbeat lapse all the same.
local function renewing(id, deadline)
  if gap <= 0 or deadline <= now - horizon then return false end
  local worker = redis.call('HGET', job_key(id), 'worker')
  local beat = worker and tonumber(redis.call('ZSCORE', K_WORKERS, worker) or '')
  return beat ~= nil and beat > now
end

local out = {1, 0}
local expired = redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', now, 'LIMIT', 0, limit, 'WITHSCORES')
for i = 1, #expired, 2 do
  local id = expired[i]
  if not renewing(id, tonumber(expired[i + 1])) then
    stall(id, now, maxlen, 'lease expired')
    out[#out + 1] = id
  end
end

local lapsed = redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', now, 'LIMIT', 0, limit)
for _, worker in ipairs(lapsed) do
  local wk = wjobs_key(worker)
  for _, id in ipairs(redis.call('SMEMBERS', wk)) do
    local row = redis.call('HMGET', job_key(id), 'state', 'worker')
    if row[1] == 'active' and row[2] == worker then
      stall(id, now, maxlen, 'worker lapsed')
      out[#out + 1] = id
    end
  end
  redis.call('DEL', wk)
  redis.call('ZREM', K_WORKERS, worker)
  -- Only a description that still exists: one that expired must not come back as a key
  -- with no TTL.
  local desc = PREFIX .. 'worker:' .. worker
  if redis.call('EXISTS', desc) == 1 then
    redis.call('HSET', desc, 'lapsed', now)
  end
end
if #lapsed > 0 then
  redis.call('HINCRBY', K_COUNTERS, 'lapsed_workers', #lapsed)
end

-- When the next reap could move anything: the earliest lease deadline, heartbeat deadline
-- or due time (a batch cut short by `limit` is due at once).
local next_ms = now + horizon
if beat_ms then next_ms = math.min(next_ms, now + beat_ms) end
for _, key in ipairs({K_ACTIVE, K_WORKERS, K_SCHEDULED}) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 then next_ms = math.min(next_ms, tonumber(first[2])) end
end
out[2] = math.max(0, next_ms - now)
return out
