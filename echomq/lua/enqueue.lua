--[[ enqueue: add a job to the plain queue, now or at a due time (Jobs.enqueue).

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
  ARGV[7]  priority         -1000..1000, higher claimed first (absent = 0); kept as `pri`
  ARGV[8]  run_at_ms        due at this server time (absent or 0 = use delay_ms); a time
                            already past is now

  Returns  {1, id} created | {0, id} an existing id: nothing changed
  Events   none (events report outcomes, not arrivals)
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_PENDING, K_SCHEDULED, K_COUNTERS, K_WAKE, K_INLANES, K_FOREIGN = unpack(KEYS, 3, 9)
--@include common
--@include arrive

local id = ARGV[1]
local jk = KEYS[2]
if redis.call('EXISTS', jk) == 1 then
  return {0, id}
end

local now = server_now()
local due = due_at(now, tonumber(ARGV[4]), tonumber(ARGV[8] or '0'))
arrive(jk, id, ARGV[2], ARGV[3], ARGV[5], ARGV[6], tonumber(ARGV[7] or '0'), due, now)
redis.call('HINCRBY', K_COUNTERS, 'enqueued', 1)
return {1, id}
