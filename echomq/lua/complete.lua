--[[ complete: finish an active job under its fencing token (Jobs.complete).

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash

  ARGV[1]  job id
  ARGV[2]  token          the attempts value the caller's claim returned
  ARGV[3]  result         opaque string ('' = none)
  ARGV[4]  keep_count     completed rows retained (oldest trimmed beyond this)
  ARGV[5]  keep_age_ms    completed rows older than this are trimmed
  ARGV[6]  events_maxlen  approximate cap of the events stream

  Returns  1 counted once | 0 stale: the job is not active or the token is not current;
           nothing changed but the refusal tally
  Events   completed {job_id, lane, seq, result, attempts}
]]
--@include common

local id, token = ARGV[1], ARGV[2]
local jk = KEYS[2]
if not holds(jk, token) then
  redis.call('HINCRBY', K_REFUSED, 'complete', 1)
  return 0
end

local now = server_now()
local row = redis.call('HMGET', jk, 'lane', 'seq')
local lane = row[1] or ''
unlease(id, jk)
redis.call('HSET', jk, 'state', 'completed', 'result', ARGV[3], 'done', now)
redis.call('ZADD', K_COMPLETED, now, id)
redis.call('HINCRBY', K_COUNTERS, 'completed', 1)
unload(lane)
emit(ARGV[6], 'type', 'completed', 'job_id', id, 'lane', lane, 'seq', row[2] or '',
  'attempts', token, 'result', ARGV[3])

-- Retention: trim a bounded number of the oldest rows per call, so memory stays
-- bounded under sustained load and no single call does unbounded work.
local excess = redis.call('ZCARD', K_COMPLETED) - tonumber(ARGV[4])
local old = redis.call('ZRANGEBYSCORE', K_COMPLETED, '-inf', now - tonumber(ARGV[5]),
  'LIMIT', 0, 16)
local n_old = #old
if excess > n_old then
  old = redis.call('ZRANGE', K_COMPLETED, 0, math.min(excess, 16) - 1)
end
for _, gone in ipairs(old) do
  redis.call('ZREM', K_COMPLETED, gone)
  redis.call('DEL', job_key(gone))
end
return 1
