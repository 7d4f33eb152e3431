--[[ complete: finish active jobs under their fencing tokens (Jobs.complete, complete_many).

  One call completes a batch (one job for Jobs.complete; a consumer's completion batch for
  complete_encoded), each job on its own: a verdict per job, a stale one a no-op. Every
  row is read and judged before the first write, then each structure the batch touches
  is written once: the active set, each holder's job set, the completed set, each load
  subject's open index and the counters take one command each per batch, a row takes
  one HSET (which blanks the lease's `worker` and `lease`: '' = none), and each counted
  completion appends its own event.

  KEYS[1]      prefix   "emq:{q}:"
  KEYS[1 + i]  job      hash   the i-th job's row (i = 1 .. N)
  KEYS[2 + N ..]        the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  keep_count     completed rows retained (oldest trimmed beyond this, in batches)
  ARGV[2]  keep_age_ms    completed rows older than this are trimmed (in batches)
  ARGV[3]  events_maxlen  approximate cap of the events stream
  then per job i, at ARGV[4i .. 4i + 3]:
    job id
    token         the attempts value the caller's claim returned
    result        opaque string ('' = none: no field written)
    lease id      the lease the caller holds (the claim id of its claim, the token's
                  `lease`); '' = a bare attempts token: state and attempts only

  Returns  {verdict, ...}, one per job, in order:
             1 counted once, or already completed under this very token (a batch re-sent
               after a lost reply: nothing changes, nothing is counted twice, no second
               event)
             0 stale: the job is not active or the token is not current; nothing changed
               but the refusal tally
  Events   completed {job_id, lane, seq, attempts, result} per job counted
]]
local n_jobs = (#ARGV - 3) / 4
-- The static keys, after the jobs' rows (echomq.keys.SCRIPT_KEYS).
local K_ACTIVE, K_COMPLETED, K_COUNTERS, K_REFUSED, K_EVENTS = unpack(KEYS, n_jobs + 2, n_jobs + 6)
--@include common
--@include retain

local verdicts, done = {}, {}
local by_id = {}  -- a job named twice in one batch: the second is judged on the first
local refused = 0
-- One read per row serves the fencing check and everything the transition needs.
for i = 1, n_jobs do
  local at = 4 * i
  local id, token, lid = ARGV[at], ARGV[at + 1], ARGV[at + 3]
  local row = redis.call('HMGET', KEYS[1 + i], 'state', 'attempts', 'lane', 'seq', 'worker',
    'lid', 'load')
  local first = by_id[id]
  if first then
    -- As if the first had run already: completed under its token, by its lease.
    row = {'completed', first.token, nil, nil, nil, first.lid}
  end
  local mine = lid == '' or row[6] == lid
  if row[1] == 'completed' and row[2] == token and mine then
    -- Only the holder of this token can have completed it (attempts is bumped by the next
    -- claim, and a completed job is never claimed again): the same call, repeated.
    verdicts[i] = 1
  elseif row[1] ~= 'active' or row[2] ~= token or not mine then
    verdicts[i] = 0
    refused = refused + 1
  else
    verdicts[i] = 1
    by_id[id] = {token = token, lid = row[6]}
    done[#done + 1] = {i = i, id = id, token = token, result = ARGV[at + 2], lane = row[3] or '',
      seq = row[4] or '', worker = row[5], load = row[7]}
  end
end
if refused > 0 then
  redis.call('HINCRBY', K_REFUSED, 'complete', refused)
end
if #done == 0 then return verdicts end

-- All checks passed; writes start here.
local now = server_now()
local now_s = string.format('%d', now)  -- formatted once, not by each command that takes it
local ids, scored, held, opened = {}, {}, {}, {}
for k, job in ipairs(done) do
  local jk = KEYS[1 + job.i]
  -- The lease's `worker` and `lease` are blanked in the same HSET rather than deleted by an
  -- HDEL: one command per job fewer. Every reader takes '' as none (JobInfo: no worker,
  -- no lease; reap and release compare `worker` with a worker id, which is never '').
  if job.result ~= '' then
    redis.call('HSET', jk, 'state', 'completed', 'result', job.result, 'done', now_s,
      'worker', '', 'lease', '')
  else
    redis.call('HSET', jk, 'state', 'completed', 'done', now_s, 'worker', '', 'lease', '')
  end
  emit(ARGV[3], 'type', 'completed', 'job_id', job.id, 'lane', job.lane, 'seq', job.seq,
    'attempts', job.token, 'result', job.result)
  ids[k] = job.id
  scored[2 * k - 1] = now_s
  scored[2 * k] = job.id
  if job.worker then
    held[job.worker] = held[job.worker] or {}
    table.insert(held[job.worker], job.id)
  end
  if job.lane ~= '' then
    -- A lane job leaves the unfinished world: its load subject (the row's `load`, else
    -- its lane) no longer counts it against max_pending.
    local subject = job.load or job.lane
    opened[subject] = opened[subject] or {}
    table.insert(opened[subject], job.id)
  end
end
-- unpack() is bounded by Lua's C stack: big batches go in slices
local function each_slice(list, fn)
  for first = 1, #list, 1000 do
    fn(unpack(list, first, math.min(first + 999, #list)))
  end
end
each_slice(ids, function(...) redis.call('ZREM', K_ACTIVE, ...) end)
for worker, members in pairs(held) do
  each_slice(members, function(...) redis.call('SREM', wjobs_key(worker), ...) end)
end
for subject, members in pairs(opened) do
  each_slice(members, function(...) redis.call('ZREM', open_key(subject), ...) end)
end
for first = 1, #scored, 2000 do
  redis.call('ZADD', K_COMPLETED, unpack(scored, first, math.min(first + 1999, #scored)))
end
local n = redis.call('HINCRBY', K_COUNTERS, 'completed', #done)

-- Retention, in batches: each TRIM_EVERY-th completion drops up to TRIM_BATCH of the
-- oldest rows beyond keep_count or older than keep_age_ms. Memory stays bounded (at most
-- keep_count + TRIM_EVERY rows) and no single call does work beyond its batch's share.
local TRIM_EVERY, TRIM_BATCH = 32, 64
local turns = math.floor(n / TRIM_EVERY) - math.floor((n - #done) / TRIM_EVERY)
if turns > 0 then
  trim_kept(K_COMPLETED, now, tonumber(ARGV[1]), tonumber(ARGV[2]), TRIM_BATCH * turns)
end
return verdicts
