--[[ fail: record a failed attempt; retry later through `scheduled`, or dead-letter.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  job id
  ARGV[2]  token
  ARGV[3]  error          text kept on the row as the last error
  ARGV[4]  retry_in_ms    -1 = exponential backoff; >= 0 = this delay
  ARGV[5]  jitter         factor in [-1, 1] scaled by the jitter ratio (random, from the client,
                          so the script stays deterministic)
  ARGV[6]  backoff_ms     base delay of the first retry
  ARGV[7]  backoff_cap_ms the longest backoff, jitter included
  ARGV[8]  jitter_ratio   e.g. 0.2 for ±20 %
  ARGV[9]  events_maxlen
  ARGV[10] lease id       the lease the caller holds (the claim id of its claim, the token's
                          `lease`); '' = a bare attempts token: state and attempts only

  Returns  'scheduled' | 'dead' | 'stale' (nothing changed but the refusal tally)
  Events   failed {job_id, lane, error, attempts}; then dead {job_id, lane, reason} when out
           of deliveries
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_ACTIVE, K_SCHEDULED, K_DEAD, K_COUNTERS, K_REFUSED, K_EVENTS, K_WAKE = unpack(KEYS, 3, 9)
--@include common

local id, token = ARGV[1], ARGV[2]
local jk = KEYS[2]
if not holds(jk, token, ARGV[10]) then
  redis.call('HINCRBY', K_REFUSED, 'fail', 1)
  return 'stale'
end

local now = server_now()
local row = redis.call('HMGET', jk, 'lane', 'stalls', 'max')
local lane = row[1] or ''
local failures = redis.call('HINCRBY', jk, 'failures', 1)
unlease(id, jk)
redis.call('HSET', jk, 'error', ARGV[3])
redis.call('HINCRBY', K_COUNTERS, 'failed', 1)
emit(ARGV[9], 'type', 'failed', 'job_id', id, 'lane', lane, 'error', ARGV[3],
  'attempts', token)

-- A malformed count (never written by EchoMQ) reads as out of deliveries: the job goes
-- dead with its error rather than the script stopping half-way through its writes.
if failures + (tonumber(row[2] or '0') or math.huge) >= (tonumber(row[3] or DEFAULT_MAX_ATTEMPTS) or 0) then
  to_dead(id, jk, lane, now, 'failed ' .. failures .. ' times')
  emit(ARGV[9], 'type', 'dead', 'job_id', id, 'lane', lane, 'reason', 'failed ' .. failures .. ' times')
  return 'dead'
end

local delay = tonumber(ARGV[4])
if delay < 0 then
  -- The cap holds, jitter included: the doubling stops at cap / (1 + ratio), so the
  -- jittered delay still spreads (no herd retrying in step at exactly the cap) and never
  -- passes the cap.
  local cap, ratio = tonumber(ARGV[7]), tonumber(ARGV[8])
  delay = math.min(tonumber(ARGV[6]) * 2 ^ (failures - 1), cap / (1 + ratio))
  delay = math.floor(math.min(delay * (1 + ratio * tonumber(ARGV[5])), cap))
end
redis.call('HSET', jk, 'state', 'scheduled', 'due', now + delay)
redis.call('ZADD', K_SCHEDULED, now + delay, id)
wake()
return 'scheduled'
