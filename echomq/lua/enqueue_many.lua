--[[ enqueue_many: add N jobs to the plain queue in one call, atomically (Jobs.enqueue_many).

  Every job gets the same options; each id that already exists is a no-op, as in enqueue.

  KEYS[1]      prefix   "emq:{q}:"
  KEYS[1 + i]  job      hash   the i-th job's row (i = 1 .. N)
  KEYS[2 + N ..]        the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  max_attempts
  ARGV[2]  delay_ms         as enqueue's
  ARGV[3]  run_at_ms        as enqueue's (0 = use delay_ms)
  ARGV[4]  priority         as enqueue's
  ARGV[5]  headers          as enqueue's, for every job
  then per job i, at ARGV[4 + 2i .. 5 + 2i]: job id, payload

  Returns  {created, ...}: 1 created, 0 an existing id, one per job in order
  Events   none
]]
local n_jobs = (#ARGV - 5) / 2
-- The static keys, after the jobs' rows (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_PENDING, K_SCHEDULED, K_COUNTERS, K_WAKE, K_INLANES, K_FOREIGN = unpack(KEYS, n_jobs + 2, n_jobs + 8)
--@include common
--@include arrive

local now = server_now()
local due = due_at(now, tonumber(ARGV[2]), tonumber(ARGV[3]))
local pri = tonumber(ARGV[4])
local out, created = {}, 0
for i = 1, n_jobs do
  local jk, id = KEYS[1 + i], ARGV[4 + 2 * i]
  if redis.call('EXISTS', jk) == 1 then
    out[i] = 0
  else
    arrive(jk, id, ARGV[5 + 2 * i], ARGV[1], '0', ARGV[5], pri, due, now)
    created = created + 1
    out[i] = 1
  end
end
if created > 0 then
  redis.call('HINCRBY', K_COUNTERS, 'enqueued', created)
end
return out
