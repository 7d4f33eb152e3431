--[[ lane_enqueue: add a job to a fair lane, with its admission checks (Lanes.submit).

  Checks run in this order, all before the first write, so a refused call changes nothing
  (no token taken, no sequence number, no dedup binding):
    1. the job id exists        -> {0, id, seq}: its original receipt
    2. dedup key bound          -> same fingerprint: {0, bound id, seq}, the original receipt
                                   (even after the deadline); other fingerprint: {-3, bound id}
    3. deadline                 -> {-2, now}
    4. rate limit (token bucket of the rate subject, on the server clock) -> {-4, retry_ms}
    5. pending cap (unfinished jobs of the load subject)                  -> {-1, limit}
  A replay (1, 2) is answered as a replay whatever the later checks would say.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash     the new job's row
  KEYS[3]  lane     zset     the lane's pending jobs (score 0, mint order)
  KEYS[4]  seq      string   sequence counter of (lane, scope); unused when ARGV[7] = 0
  KEYS[5]  dedup    hash     {job, fp, seq} of a dedup key; unused when ARGV[11] = ''
  KEYS[6]  rate     hash     {tokens, ts} token bucket of the rate subject (include/bucket.lua);
                             unused when ARGV[13] = 0. Absent = a full bucket
  KEYS[7]  open     zset     the load subject's open index (include/common.lua, open_key):
                             what max_pending counts with its lane; a job counted against
                             a subject other than its lane joins it
  KEYS[8]  own lane zset    the load subject's own lane (KEYS[3] when the subject is the
                             lane): its pending jobs count against it
  KEYS[9..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  job id
  ARGV[2]  lane name
  ARGV[3]  payload
  ARGV[4]  max_attempts
  ARGV[5]  max_pending      refuse when the load subject already has this many unfinished
                            jobs (pending + active + scheduled); 0 = no limit
  ARGV[6]  deadline_ms      refuse when server now >= this; 0 = no deadline
  ARGV[7]  use_seq          1 = number the job within (lane, scope), atomically
  ARGV[8]  seq_ttl_ms       lifetime of the sequence counter
  ARGV[9]  attempts         initial fencing token
  ARGV[10] load subject     what max_pending counts per ('' = the lane); kept on the row as
                            `load` when it is not the lane, and unloaded on completion/death
  ARGV[11] dedup fingerprint  '' = no dedup key
  ARGV[12] dedup ttl_ms     lifetime of the dedup binding
  ARGV[13] rate             tokens per second (decimal); 0 = no rate limit
  ARGV[14] burst            bucket size (whole tokens, >= 1 when rate > 0)
  ARGV[15] headers          opaque string (a JSON object of str -> str, e.g. a traceparent)
                            kept on the row as `headers`; '' (or absent) = none: no field written
  ARGV[16] priority         -1000..1000, higher first within the lane (absent = 0); kept as `pri`
  ARGV[17] delay_ms         > 0: wait in `scheduled` until server now + delay, then enter
                            the lane as an arriving job does (absent = 0: now)
  ARGV[18] run_at_ms        due at this server time instead (absent or 0 = use delay_ms)

  Returns  {1, id, seq}     created (seq = -1 without use_seq)
           {0, id, seq}     the id exists, or the dedup key is bound with the same
                            fingerprint: nothing changed, the original id and seq
           {-1, limit}      pending cap reached: nothing changed
           {-2, now}        deadline passed: nothing changed
           {-3, id}         dedup key bound to job `id` with another fingerprint: nothing changed
           {-4, retry_ms}   rate limited, a token is due in retry_ms: nothing changed
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_PENDING, K_SCHEDULED, K_COUNTERS, K_WAKE, K_INLANES, K_FOREIGN = unpack(KEYS, 9, 15)
--@include common
--@include bucket

local id, lane = ARGV[1], ARGV[2]
local jk = KEYS[2]
if redis.call('EXISTS', jk) == 1 then
  return {0, id, tonumber(redis.call('HGET', jk, 'seq') or '-1')}
end

local fp = ARGV[11]
if fp ~= '' then
  local bound = redis.call('HMGET', KEYS[5], 'job', 'fp', 'seq')
  if bound[1] then
    if bound[2] ~= fp then
      return {-3, bound[1]}
    end
    return {0, bound[1], tonumber(bound[3] or '-1')}
  end
end

local now = server_now()
local deadline = tonumber(ARGV[6])
if deadline > 0 and now >= deadline then
  return {-2, now}
end

local rate, burst = tonumber(ARGV[13]), tonumber(ARGV[14])
local tokens = 0
if rate > 0 then
  local retry_ms
  tokens, retry_ms = bucket_peek(KEYS[6], rate, burst, now)
  if retry_ms > 0 then
    return {-4, retry_ms}
  end
end

local subject = ARGV[10]
if subject == '' then subject = lane end
local limit = tonumber(ARGV[5])
if limit > 0 and at_cap(subject, KEYS[7], KEYS[8], limit) then
  return {-1, limit}
end

-- All checks passed; writes start here.
if rate > 0 then
  bucket_take(KEYS[6], tokens, rate, burst, now)
end
local seq = -1
if ARGV[7] == '1' then
  seq = redis.call('INCR', KEYS[4]) - 1
  redis.call('PEXPIRE', KEYS[4], ARGV[8])
end
-- The row, in one HSET: what no default covers. No `id` (the key holds it), no `max` at
-- its default (DEFAULT_MAX_ATTEMPTS), no counts at 0 (readers take a missing count as 0).
local row = {'lane', lane, 'body', ARGV[3], 'enq', now}
if tonumber(ARGV[4]) ~= DEFAULT_MAX_ATTEMPTS then
  put(row, 'max', ARGV[4])
end
if ARGV[9] ~= '0' then
  put(row, 'attempts', ARGV[9])
end
if seq >= 0 then
  put(row, 'seq', seq)
end
if (ARGV[15] or '') ~= '' then
  put(row, 'headers', ARGV[15])
end
if subject ~= lane then
  put(row, 'load', subject)
end
local pri = tonumber(ARGV[16] or '0')
if pri ~= 0 then
  put(row, 'pri', pri)
end
local due = due_at(now, tonumber(ARGV[17] or '0'), tonumber(ARGV[18] or '0'))
if due > 0 then
  put(row, 'state', 'scheduled')
  put(row, 'due', due)
end
redis.call('HSET', jk, unpack(row))
if fp ~= '' then
  redis.call('HSET', KEYS[5], 'job', id, 'fp', fp, 'seq', seq)
  redis.call('PEXPIRE', KEYS[5], ARGV[12])
end
if subject ~= lane then
  -- counted against another subject: in its open index from now to the job's end (a job
  -- of its lane's own is counted by its lane while it waits: no index entry, open_key)
  redis.call('ZADD', KEYS[7], now, id)
end
redis.call('HINCRBY', K_COUNTERS, 'enqueued', 1)
if due > 0 then
  if subject == lane then
    -- a scheduled job of its lane's own stands in the open index until it enters the lane
    redis.call('ZADD', KEYS[7], now, id)
  end
  redis.call('ZADD', K_SCHEDULED, due, id)
  wake()  -- a parked consumer must shorten its sleep to the new due time
else
  place(id, lane, true, subject ~= lane, pri)
end
return {1, id, seq}
