-- The queue's pulse: the server's own record that it was running (reap.lua, heartbeat.lua).
--
-- Every beat and every reap call (by the reaper or by a consumer waiting to take over)
-- writes the server time it ran at into `swept`. While something is active the reaper
-- and its stand-ins call at least every gap/2 and busy workers beat every heartbeat, so
-- a live queue never leaves `gap_ms` between two of them. A longer gap means the server
-- did not answer (frozen, down, cut off) or nobody could reach it: a deadline that passed
-- in it says nothing about its holder, whose beats and renewals could not land either
-- (they arrive now, in a burst, in any order, some after a client's retry backoff).
--
-- So the first beat or reap call after such a gap, before anything is judged, moves
-- every heartbeat deadline and lease deadline before now + grace to now + grace: each
-- holder gets `grace` (one lapse) of running server time to show it is alive. A gap
-- shorter than `gap_ms` is no outage and needs no grace, because gap_ms < lapse -
-- heartbeat: a freeze that short cannot carry a live worker's deadline past before its
-- queued beat lands. No stall is charged for an outage. Counter `outages`, event
-- `outage {quiet_ms}`.
--
-- `swept` (K_SWEPT, declared by the script) is a hash: at = server time of the last beat
-- or reap call, by = its caller,
-- busy = '1' if anything was active then.

local function pulse(now, gap_ms, grace_ms, maxlen, by)
  local prev = redis.call('HMGET', K_SWEPT, 'at', 'busy')
  local last = tonumber(prev[1] or '')
  local busy = redis.call('ZCARD', K_ACTIVE) > 0
  redis.call('HSET', K_SWEPT, 'at', now, 'by', by, 'busy', busy and '1' or '0')
  -- Nothing active: nobody's jobs to protect (an idle worker's deadline is its long
  -- idle lapse), and an idle queue's calls are rare by design.
  if gap_ms <= 0 or not last or now - last <= gap_ms or not busy then return false end
  local until_ms = now + grace_ms
  for _, worker in ipairs(redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', '(' .. until_ms)) do
    redis.call('ZADD', K_WORKERS, until_ms, worker)
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', '(' .. until_ms)) do
    redis.call('ZADD', K_ACTIVE, until_ms, id)
    redis.call('HSET', job_key(id), 'lease', until_ms)
  end
  -- Counted only when the queue was busy before the gap: after an idle spell (calls
  -- rare by design) a claim came in the gap, and the grace is given all the same (a
  -- freeze right after that claim looks the same), but it is no outage to report.
  if prev[2] == '1' then
    redis.call('HINCRBY', K_COUNTERS, 'outages', 1)
    emit(maxlen, 'type', 'outage', 'quiet_ms', now - last)
  end
  return true
end
