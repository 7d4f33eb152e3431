--[[ enqueue: add a job to the plain FIFO queue, now or after a delay.

  KEYS[1]  prefix   "emq:{q}:"   (the queue's hash tag)
  KEYS[2]  job      hash         the new job's row
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  job id           branded JOB_ ULID
  ARGV[2]  payload          opaque string (JSON by convention)
  ARGV[3]  max_attempts     deliveries allowed (failures + lease expiries)
  ARGV[4]  delay_ms         0 = pending now; > 0 = scheduled, due at server now + delay
  ARGV[5]  attempts         initial fencing token (0, or carried over from a revived job)
  ARGV[6]  headers          opaque string (a JSON object of str -> str, e.g. a traceparent)
                            kept on the row as `headers`; '' (or absent) = none: no field written

  Returns  {1, id} created | {0, id} an existing id: nothing changed
  Events   none (events report outcomes, not arrivals)
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_PENDING, K_SCHEDULED, K_COUNTERS, K_WAKE, K_INLANES, K_FOREIGN = unpack(KEYS, 3, 9)
--@include common

local id = ARGV[1]
local jk = KEYS[2]
if redis.call('EXISTS', jk) == 1 then
  return {0, id}
end

local now = server_now()
local delay = tonumber(ARGV[4])
-- The row, in one HSET: what no default covers. No `id` (the key holds it), no `lane`
-- (the plain queue has none), no `max` at its default (DEFAULT_MAX_ATTEMPTS), no counts
-- at 0 (readers take a missing count as 0), no state while pending.
local row = {'body', ARGV[2], 'enq', now}
if tonumber(ARGV[3]) ~= DEFAULT_MAX_ATTEMPTS then
  put(row, 'max', ARGV[3])
end
if ARGV[5] ~= '0' then
  put(row, 'attempts', ARGV[5])
end
if (ARGV[6] or '') ~= '' then
  put(row, 'headers', ARGV[6])
end
if delay > 0 then
  put(row, 'state', 'scheduled')
  put(row, 'due', now + delay)
end  -- else pending: a row with no `state` (include/common.lua, place)
redis.call('HSET', jk, unpack(row))
redis.call('HINCRBY', K_COUNTERS, 'enqueued', 1)
if delay > 0 then
  redis.call('ZADD', K_SCHEDULED, now + delay, id)
  -- A parked consumer must shorten its sleep to the new due time.
  wake()
else
  place(id, '', true)
end
return {1, id}
