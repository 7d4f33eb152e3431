--[[ complete: finish an active job under its fencing token (Jobs.complete).

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash

  ARGV[1]  job id
  ARGV[2]  token          the attempts value the caller's claim returned
  ARGV[3]  result         opaque string ('' = none)
  ARGV[4]  keep_count     completed rows retained (oldest trimmed beyond this, in batches)
  ARGV[5]  keep_age_ms    completed rows older than this are trimmed (in batches)
  ARGV[6]  events_maxlen  approximate cap of the events stream
  ARGV[7]  lease id       the lease the caller holds (the claim id of its claim, the token's
                          `lease`); '' = a bare attempts token: state and attempts only

  Returns  1 counted once, or already completed under this very token (a batch re-sent
           after a lost reply: nothing changes, nothing is counted twice, no second event)
           | 0 stale: the job is not active or the token is not current; nothing changed
           but the refusal tally
  Events   completed {job_id, lane, seq, result, attempts}
]]
--@include common

local id, token, lid = ARGV[1], ARGV[2], ARGV[7] or ''
local jk = KEYS[2]
-- One read serves the fencing check and everything the transition needs.
local row = redis.call('HMGET', jk, 'state', 'attempts', 'lane', 'seq', 'worker', 'lid')
local mine = lid == '' or row[6] == lid
if row[1] == 'completed' and row[2] == token and mine then
  -- Only the holder of this token can have completed it (attempts is bumped by the next
  -- claim, and a completed job is never claimed again): the same call, repeated.
  return 1
end
if row[1] ~= 'active' or row[2] ~= token or not mine then
  redis.call('HINCRBY', K_REFUSED, 'complete', 1)
  return 0
end

local now = server_now()
local lane = row[3] or ''
redis.call('ZREM', K_ACTIVE, id)
if row[5] then
  redis.call('SREM', wjobs_key(row[5]), id)
end
redis.call('HSET', jk, 'state', 'completed', 'result', ARGV[3], 'done', now)
redis.call('HDEL', jk, 'worker', 'lease')
redis.call('ZADD', K_COMPLETED, now, id)
local n = redis.call('HINCRBY', K_COUNTERS, 'completed', 1)
unload(id, jk, lane)
emit(ARGV[6], 'type', 'completed', 'job_id', id, 'lane', lane, 'seq', row[4] or '',
  'attempts', token, 'result', ARGV[3])

-- Retention, in batches: every TRIM_EVERY-th completion drops up to TRIM_BATCH of the
-- oldest rows beyond keep_count or older than keep_age_ms. Memory stays bounded (at most
-- keep_count + TRIM_EVERY rows) and no single call does unbounded work.
local TRIM_EVERY, TRIM_BATCH = 32, 64
if n % TRIM_EVERY == 0 then
  local old = redis.call('ZRANGEBYSCORE', K_COMPLETED, '-inf', now - tonumber(ARGV[5]),
    'LIMIT', 0, TRIM_BATCH)
  local excess = redis.call('ZCARD', K_COMPLETED) - tonumber(ARGV[4])
  if excess > #old then
    -- the oldest `excess` rows include every aged one: both sets start at the low end
    old = redis.call('ZRANGE', K_COMPLETED, 0, math.min(excess, TRIM_BATCH) - 1)
  end
  if #old > 0 then
    redis.call('ZREM', K_COMPLETED, unpack(old))
    for i, gone in ipairs(old) do old[i] = job_key(gone) end
    redis.call('DEL', unpack(old))
  end
end
return 1
