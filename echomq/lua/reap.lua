--[[ reap: return presumed-dead holders' jobs to their lanes (Stalled.reap).

  Two ways a holder is presumed dead, both judged on the server clock:
    * its lease deadline passed (the floor: works even without heartbeats);
    * its worker's heartbeat deadline passed (early: a killed worker's jobs come back
      after the heartbeat lapse, not after the whole lease). Fencing keeps this safe:
      a holder that was only slow finds its token stale.
  Also promotes due scheduled jobs, so retries flow even when no consumer claims.

  With a reaper id (ARGV[3]) the call first takes or renews the queue's reaper lock
  (SET NX PX): one reaper per queue, whatever the number of consumer processes. A caller
  that does not hold the lock changes nothing and learns when the lock may free up; the
  holder learns how long nothing can come due, so an idle queue is reaped rarely.

  KEYS[1]  prefix   "emq:{q}:"

  ARGV[1]  limit          at most this many expired leases, and this many lapsed workers
  ARGV[2]  events_maxlen
  ARGV[3]  reaper id      '' = reap unconditionally (no lock)
  ARGV[4]  lock_ms        how long the lock outlives this call
  ARGV[5]  horizon_ms     the longest wait reported: a job claimed after this call can
                          come due no sooner than its holder's heartbeat lapse
  ARGV[6]  margin_ms      with a reaper id: outage detection (0 = off), below

  An outage: no reaper reached Valkey for longer than a live queue ever leaves between two
  sweeps (Valkey down, frozen or cut off): the same holder sweeps at least once per
  horizon, and a successor takes over within the lock's time, each + margin_ms. Heartbeats and lease renewals
  could not land during it either, so a deadline that passed then says nothing about its
  holder: before judging anyone, every heartbeat deadline and lease deadline before now +
  horizon moves to now + horizon. A holder that is alive beats and renews within that
  lapse; one that died meanwhile is reaped after it, its stall counted as usual. No stall
  is charged to a job for the outage itself.

  Returns  {leader, wait_ms, moved id...}
             leader   1 reaped (the lock is ours, or no lock asked) | 0 another reaper
                      holds the lock: nothing changed
             wait_ms  leader: until the earliest lease deadline, heartbeat deadline or due
                      time (at most horizon_ms, at least 0); else the lock's remaining time
           then the ids moved (to their lane, or to dead when out of deliveries)
  Events   reaped {job_id, lane, why}; dead {job_id, lane, reason} when out of deliveries;
           outage {quiet_ms} when a sweep finds one (counter `outages`)
]]
--@include common

local limit, maxlen = tonumber(ARGV[1]), ARGV[2]
local reaper = ARGV[3] or ''
local K_REAPER = PREFIX .. 'reaper'
if reaper ~= '' then
  local holder = redis.call('GET', K_REAPER)
  if holder and holder ~= reaper then
    return {0, math.max(0, redis.call('PTTL', K_REAPER))}
  end
  redis.call('SET', K_REAPER, reaper, 'PX', ARGV[4])
end

local now = server_now()
promote(now, limit)

if reaper ~= '' then
  local K_SWEPT = PREFIX .. 'swept'
  local prev = redis.call('HMGET', K_SWEPT, 'at', 'by')
  local last, margin = tonumber(prev[1] or ''), tonumber(ARGV[6] or '0')
  local expected = tonumber(prev[2] == reaper and ARGV[5] or ARGV[4]) + margin
  redis.call('HSET', K_SWEPT, 'at', now, 'by', reaper)
  if last and margin > 0 and now - last > expected then
    local until_ms = now + tonumber(ARGV[5] or '0')
    for _, worker in ipairs(redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', '(' .. until_ms)) do
      redis.call('ZADD', K_WORKERS, until_ms, worker)
    end
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', '(' .. until_ms)) do
      redis.call('ZADD', K_ACTIVE, until_ms, id)
      redis.call('HSET', job_key(id), 'lease', until_ms)
    end
    redis.call('HINCRBY', K_COUNTERS, 'outages', 1)
    emit(maxlen, 'type', 'outage', 'quiet_ms', now - last)
  end
end

local out = {1, 0}
local expired = redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  stall(id, now, maxlen, 'lease expired')
  out[#out + 1] = id
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
local next_ms = now + tonumber(ARGV[5] or '0')
for _, key in ipairs({K_ACTIVE, K_WORKERS, K_SCHEDULED}) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 then next_ms = math.min(next_ms, tonumber(first[2])) end
end
out[2] = math.max(0, next_ms - now)
return out
