-- Shared helpers, spliced into each transition script by scripts.py at load time.
--
-- Keys. Every script is handed the keys it touches in KEYS: KEYS[1] the queue prefix
-- ("emq:{q}:", carrying the queue's hash tag, so all of a queue's keys live in one Valkey
-- Cluster slot), then the call's own keys, then the queue's static keys the script uses,
-- unpacked by its first lines into K_NEW, K_ACTIVE, … (the list, in order, is
-- echomq.keys.SCRIPT_KEYS; tests/echomq/test_keys.py checks each script declares every
-- K_ its code and the helpers it calls use). A claim also gets its worker's job set, its
-- description and its memo (K_HELD, K_HOLDER, K_MEMO), a heartbeat its job set (K_HELD).
--
-- Built here from the prefix, only where the name comes from data the script reads, so
-- no caller could name it beforehand:
--   job:<id>      rows of ids popped from a lane, the pending or scheduled set, the
--                 active set, a worker's job set or a claim memo (claim, promote, reap)
--   lane:<name>   the lane a row or the new/ring lists name (place, lane_claim, stats)
--   open:<name>   the load subject a row names (unload, complete, retry_dead)
--   wjobs:<id>    the holder a row names (unlease, complete), a lapsed worker (reap)
--   worker:<id>   a lapsed worker's description (reap)
-- They share the prefix, so they hash to the same slot as the keys declared.

local PREFIX = KEYS[1]

-- The server's clock in epoch milliseconds. The only clock EchoMQ ever trusts.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function job_key(id) return PREFIX .. 'job:' .. id end
local function lane_key(lane) return PREFIX .. 'lane:' .. lane end
local function wjobs_key(worker) return PREFIX .. 'wjobs:' .. worker end
-- A load subject's open index, score = enqueue time: its unfinished jobs but those the
-- subject's own lane already holds. A lane job whose load subject is its lane (no `load`
-- on its row: the usual case) is in the index while active or scheduled; a job counted
-- against another subject (`load`) is in that subject's index from enqueue to its end,
-- pending included, and counted in K_FOREIGN while it waits in its lane. So
--   unfinished(s) = ZCARD(open:s) + ZCARD(lane:s) - HGET(foreign, s)
-- (load_count; unfinished.lua), what max_pending caps and what Lanes.unfinished lists, and a pending job
-- costs no index entry: one fewer sorted-set entry per job waiting in a lane.
local function open_key(subject) return PREFIX .. 'open:' .. subject end

-- `open_k`, `lane_k`: the subject's open index and lane, as the caller declared them.
local function foreign_of(subject)
  return tonumber(redis.call('HGET', K_FOREIGN, subject) or '0') or 0
end

local function load_count(subject, open_k, lane_k)
  return redis.call('ZCARD', open_k) + redis.call('ZCARD', lane_k) - foreign_of(subject)
end

-- Whether the subject already has `limit` unfinished jobs (max_pending). The foreign count
-- only lowers the sum, so it is read only when the two depths alone reach the limit: the
-- usual admission costs two ZCARDs, as the one ZCARD and one ZADD of an index that held
-- waiting jobs did.
local function at_cap(subject, open_k, lane_k, limit)
  local n = redis.call('ZCARD', open_k) + redis.call('ZCARD', lane_k)
  return n >= limit and n - foreign_of(subject) >= limit
end

-- Leave one token on the wake list for a parked consumer. At most one token is ever
-- kept: a consumer that wakes and finds more work left passes the token on.
local function wake()
  if redis.call('LLEN', K_WAKE) == 0 then
    redis.call('RPUSH', K_WAKE, '1')
  end
end

-- Put a job back where claims find it: its lane or the plain pending set. A lane that
-- was empty is activated: it joins the tail of `new`, which lane_claim serves before the
-- ring. Every arrival counts, a reaped, released, promoted or revived job too: its lane
-- had nothing waiting, so it is a sparse lane by the only measure the queue has, and the
-- ring's bound does not depend on how many activations arrive. A non-empty lane is
-- already in `new` or the ring (lane_claim moves it), so each non-empty lane is in
-- exactly one of the two lists, once, and no empty lane is in either.
-- A pending row has no `state` field: pending is what a row without one is (readers say
-- so: JobInfo, and every script's check wants 'active', 'dead' or 'completed'), which keeps
-- 16 bytes off each of the many rows that wait (docs/performance.md, memory).
-- `state_written`: the caller wrote the row just now, with no state (a new job: in no
-- index yet). `load`: the row's `load` (false: none; the lane is its subject).
-- A job of its lane's own leaves the open index, which its lane now stands in for; one
-- counted against another subject stays in that one's and is counted foreign meanwhile.
-- `pri`: the job's priority, whose negation is its score, so ZPOPMIN takes the highest
-- first and mint order (the member) among equals; nil = read the row's `pri` (a row at 0
-- has none), which only the paths that put a job back pay for.
local function place(id, lane, state_written, load, pri)
  if pri == nil then
    pri = tonumber(redis.call('HGET', job_key(id), 'pri') or '0') or 0
  end
  local score = 0
  if pri ~= 0 then score = -pri end
  if lane and lane ~= '' then  -- HGET answers false for a row with no lane (the plain queue)
    local lk = lane_key(lane)
    redis.call('ZADD', lk, score, id)
    redis.call('INCR', K_INLANES)
    if redis.call('ZCARD', lk) == 1 then
      redis.call('RPUSH', K_NEW, lane)
    end
    if load then
      redis.call('HINCRBY', K_FOREIGN, lane, 1)
    elseif not state_written then
      redis.call('ZREM', open_key(lane), id)
    end
  else
    redis.call('ZADD', K_PENDING, score, id)
  end
  if not state_written then
    redis.call('HDEL', job_key(id), 'state')
  end
  wake()
end

-- Append a field and its value to a flat HSET argument list.
local function put(list, field, value)
  list[#list + 1] = field
  list[#list + 1] = value
end

local function emit(maxlen, ...)
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', maxlen, '*', ...)
end

-- What a lane job counts against for max_pending: its row's `load` subject (set by
-- lane_enqueue when it is not the lane), else its lane.
local function load_of(jk, lane)
  return redis.call('HGET', jk, 'load') or lane
end

-- A lane job that left the unfinished world (completed or dead) no longer counts
-- against its load subject's max_pending (an emptied index is deleted by Valkey).
local function unload(id, jk, lane)
  if lane and lane ~= '' then
    redis.call('ZREM', open_key(load_of(jk, lane)), id)
  end
end

-- Take a job off the active set and its holder's job set.
local function unlease(id, jk)
  redis.call('ZREM', K_ACTIVE, id)
  local worker = redis.call('HGET', jk, 'worker')
  if worker then
    redis.call('SREM', wjobs_key(worker), id)
  end
  redis.call('HDEL', jk, 'worker', 'lease')
end

local function to_dead(id, jk, lane, now, reason)
  redis.call('HSET', jk, 'state', 'dead', 'reason', reason, 'done', now)
  redis.call('ZADD', K_DEAD, now, id)
  redis.call('HINCRBY', K_COUNTERS, 'dead', 1)
  unload(id, jk, lane)
end

-- Move up to `limit` due scheduled jobs back to their lane or the pending set.
-- The scheduled set loses the batch in one ZREM (slices: unpack() is bounded by Lua's C
-- stack); a plain job's `due` and `state` go in one HDEL, so a delayed job costs its claim
-- little more than one that never waited.
local function promote(now, limit)
  local due = redis.call('ZRANGEBYSCORE', K_SCHEDULED, '-inf', now, 'LIMIT', 0, limit)
  if #due == 0 then return 0 end
  for first = 1, #due, 1000 do
    redis.call('ZREM', K_SCHEDULED, unpack(due, first, math.min(first + 999, #due)))
  end
  for _, id in ipairs(due) do
    local jk = job_key(id)
    local row = redis.call('HMGET', jk, 'lane', 'load', 'pri')
    local pri = tonumber(row[3] or '0') or 0
    if row[1] and row[1] ~= '' then
      redis.call('HDEL', jk, 'due')
      place(id, row[1], false, row[2], pri)
    else
      redis.call('HDEL', jk, 'due', 'state')
      place(id, '', true, false, pri)  -- the plain queue keeps no open index
    end
  end
  redis.call('HINCRBY', K_COUNTERS, 'promoted', #due)
  return #due
end

-- When a new job is due: `run_at` (server epoch ms, > 0) wins, else now + `delay`; 0 =
-- now (a time already past is now too).
local function due_at(now, delay, run_at)
  local due = 0
  if run_at > 0 then due = run_at elseif delay > 0 then due = now + delay end
  if due <= now then return 0 end
  return due
end

-- Whether the queue is paused (Queue.pause): a claim then hands out nothing, promotes
-- nothing and names no due time, so a parked consumer stays parked until resume wakes it.
local function paused()
  return redis.call('EXISTS', K_PAUSED) == 1
end

-- The due time of the next scheduled job, or -1: a parked consumer sleeps no longer.
local function next_due()
  local first = redis.call('ZRANGE', K_SCHEDULED, 0, 0, 'WITHSCORES')
  if #first == 0 then return -1 end
  return tonumber(first[2])
end

-- A count on a job row as a number, or nil when the field holds anything HINCRBY would
-- refuse (EchoMQ never writes such a value; a hand-edited or foreign row might).
--
-- A Lua number is a double: integers are exact only up to 2^53. A count at or past
-- MAX_COUNT reads as malformed too, so the increment a claim computes on it (attempts + 1,
-- lease_all) stays an exact integer and the HINCRBY a stall does neither overflows (2^63 - 1
-- is where HINCRBY itself refuses) nor differs from what Lua computes (echomq.checks.MAX_INT
-- keeps every value the client sends far below it).
local MAX_COUNT = 9007199254740991  -- 2^53 - 1
local function count(v, default)
  if not v then return default end
  if string.match(v, '^%d+$') then
    local n = tonumber(v)
    if n < MAX_COUNT then return n end
  end
  return nil
end

local DEAD_MALFORMED = 'malformed row'
-- The largest token a claim hands out (echomq.checks.MAX_TOKEN, 2^50): the one bound the
-- client checks tokens and enqueued attempts against. A row already at it cannot be
-- leased again, so it goes dead as malformed rather than carry a token no call accepts.
local MAX_TOKEN = 1125899906842624
-- A row without `max` allows this many deliveries (echomq.checks.DEFAULT_MAX_ATTEMPTS):
-- the enqueues write `max` only when it differs, a byte-size step of memory per job.
local DEFAULT_MAX_ATTEMPTS = 5
local EVENTS_MAXLEN = 100000  -- for the rare event of a script that is not given the cap

-- Lease popped jobs to `worker`: bump each one's fencing token and record the deadline;
-- the active set and the worker's job set take the whole batch in one command each.
-- Returns the claim tuples the client decodes (the job's `headers` last, '' = none).
--
-- Every popped job is checked before the first write to any of them: Lua does not roll
-- back, so one row whose `attempts` is not a count would stop the script half-way, with
-- the whole batch popped from its lanes and leased to no one. A malformed row goes dead
-- (reason "malformed row", where an operator sees it); an id with no row, or whose key
-- is not a hash, is dropped and counted (`dropped`).
--
-- Two commands per row: one HMGET reads the fencing token and everything the claim tuple
-- carries (the payload is the row's `body`; a row written before that name holds it as
-- `payload`, read by one HGET more for such a row only), one HSET writes the new token
-- (attempts + 1, the increment HINCRBY would make, computed here from the count just
-- checked) and the lease. Numbers the rows and sets share are formatted once per call.
--
-- A claim also proves the worker alive: a registered worker's heartbeat deadline moves to
-- now + its lapse, so an idle worker (which beats rarely, with a long deadline) that
-- starts holding jobs is reclaimed after the short lapse if it dies.
--
-- `claim_id` (minted by the client per call, echomq.jobs) names the leases: every leased
-- row keeps it as `lid`, each claim tuple carries it (the token's holder part, checked by
-- complete, fail, extend and release), and the ids leased are remembered under
-- claim:<claim_id> for `memo_ms`, so a re-run of the same call (a client retrying after
-- a lost reply) answers the same batch (claim_replay) instead of leasing a second one.
-- K_HELD (the worker's job set), K_HOLDER (its description) and K_MEMO (claim:<claim_id>)
-- are the claim script's own keys, KEYS[2..4].
local function lease_all(ids, worker, now, lease_ms, claim_id, memo_ms)
  local out, scored, good, rows, jks = {}, {}, {}, {}, {}
  if #ids == 0 then return out end
  local malformed, dropped, foreign = {}, 0, {}
  for _, id in ipairs(ids) do
    local jk = job_key(id)
    local row = redis.pcall('HMGET', jk, 'attempts', 'state', 'lane', 'body',
      'seq', 'enq', 'stalls', 'headers', 'load')
    if type(row) ~= 'table' or row.err or not (row[2] or row[6]) then
      -- no row (a pending one has no state, but every row has `enq`)
      dropped = dropped + 1
    else
      if row[3] and row[9] then
        -- counted against another subject: it leaves its lane's foreign count (and stays
        -- in that subject's open index, where it has been since its enqueue)
        foreign[row[3]] = (foreign[row[3]] or 0) + 1
      end
      local attempts = count(row[1], 0)
      if attempts == nil or attempts >= MAX_TOKEN then
        malformed[#malformed + 1] = {id, row[3] or ''}
      else
        if not row[4] then row[4] = redis.call('HGET', jk, 'payload') end  -- an older row
        good[#good + 1] = id
        rows[#rows + 1] = row
        jks[#jks + 1] = jk
      end
    end
  end
  -- All checks passed; writes start here.
  local until_ms = now + lease_ms
  -- %d: a Lua number passed as is would be written as %.14g (1e+15 past 14 digits)
  local until_s = string.format('%d', until_ms)
  local opened = {}  -- lane -> {enq, id, ...}: its own jobs, now unfinished outside it
  for i, id in ipairs(good) do
    local row = rows[i]
    if row[3] and row[3] ~= '' and not row[9] then
      local entries = opened[row[3]] or {}
      entries[#entries + 1] = row[6] or now
      entries[#entries + 1] = id
      opened[row[3]] = entries
    end
    local token = count(row[1], 0) + 1
    redis.call('HSET', jks[i], 'attempts', string.format('%d', token), 'state', 'active',
      'lease', until_s, 'worker', worker, 'lid', claim_id)
    out[i] = {id, row[3] or '', row[4] or '', token, until_ms, row[5] or '',
              row[6] or '0', row[7] or '0', row[8] or '', claim_id}
    scored[2 * i - 1] = until_s
    scored[2 * i] = id
  end
  for _, bad in ipairs(malformed) do
    local id, lane = bad[1], bad[2]
    to_dead(id, job_key(id), lane, now, DEAD_MALFORMED)
    emit(EVENTS_MAXLEN, 'type', 'dead', 'job_id', id, 'lane', lane, 'reason', DEAD_MALFORMED)
  end
  if dropped > 0 then
    redis.call('HINCRBY', K_COUNTERS, 'dropped', dropped)
  end
  for lane, n in pairs(foreign) do
    if redis.call('HINCRBY', K_FOREIGN, lane, -n) <= 0 then
      redis.call('HDEL', K_FOREIGN, lane)
    end
  end
  for lane, entries in pairs(opened) do
    for first = 1, #entries, 2000 do  -- unpack() is bounded by Lua's C stack: in slices
      redis.call('ZADD', open_key(lane), unpack(entries, first, math.min(first + 1999, #entries)))
    end
  end
  if #good == 0 then return out end
  -- unpack() is bounded by Lua's C stack: send big batches in slices
  for first = 1, #good, 1000 do
    local last = math.min(first + 999, #good)
    redis.call('ZADD', K_ACTIVE, unpack(scored, 2 * first - 1, 2 * last))
    redis.call('SADD', K_HELD, unpack(good, first, last))
  end
  redis.call('HINCRBY', K_COUNTERS, 'claimed', #good)
  if claim_id ~= '' and memo_ms > 0 then
    redis.call('SET', K_MEMO, cjson.encode(good), 'PX', memo_ms)
  end
  local lapse = tonumber(redis.call('HGET', K_HOLDER, 'lapse_ms') or '')
  if lapse then
    redis.call('ZADD', K_WORKERS, 'XX', now + lapse, worker)
  end
  return out
end

-- The check a claim makes before its first write (promote, pops, leases): the worker's
-- job set, the one key named by the caller that a foreign value could make refuse SADD
-- after the batch was popped. (The memo key is read by claim_replay's GET, which refuses
-- a foreign type before any write too.) Returns an error reply, or nil.
local function claim_precheck()
  local wt = redis.call('TYPE', K_HELD)['ok']
  if wt ~= 'none' and wt ~= 'set' then
    return redis.error_reply('ERR ' .. K_HELD .. ' is a ' .. wt .. ', not a set')
  end
  return nil
end

-- The batch an earlier run of the same claim call leased, or nil when this call is new
-- (or its memo expired). Only jobs still leased under that claim id, to that worker,
-- come back: a job reaped or finished since is not the caller's any more. Writes nothing.
local function claim_replay(worker, claim_id)
  if claim_id == '' then return nil end
  local memo = redis.call('GET', K_MEMO)
  if not memo then return nil end
  local ok, ids = pcall(cjson.decode, memo)
  if not ok or type(ids) ~= 'table' then return nil end
  local out = {}
  for _, id in ipairs(ids) do
    local row = redis.call('HMGET', job_key(id), 'state', 'lid', 'worker', 'attempts', 'lease',
      'lane', 'body', 'seq', 'enq', 'stalls', 'headers', 'payload')
    if row[1] == 'active' and row[2] == claim_id and row[3] == worker then
      out[#out + 1] = {id, row[6] or '', row[7] or row[12] or '', tonumber(row[4]),
                       tonumber(row[5]), row[8] or '', row[9] or '0', row[10] or '0',
                       row[11] or '', claim_id}
    end
  end
  return out
end

-- The opening both claims share: the precheck, a re-run's replay, the pause, due jobs
-- promoted. Returns now to go on, or nil and the reply to return as it is.
local function claim_begin(worker, claim_id, promote_limit)
  local refused = claim_precheck()
  if refused then return nil, refused end
  local now = server_now()
  local replayed = claim_replay(worker, claim_id)
  if replayed then
    -- The same call again: its first run's reply was lost. Nothing is popped or leased.
    local out = {now, next_due()}
    for _, claim in ipairs(replayed) do out[#out + 1] = claim end
    redis.call('HINCRBY', K_COUNTERS, 'replayed', 1)
    return nil, out
  end
  if paused() then return nil, {now, -1} end  -- nothing, and no due time to wake for
  promote(now, promote_limit)
  return now
end

-- A holder presumed dead: its lease expired or its heartbeat lapsed. Count the stall
-- apart from failures; out of deliveries -> dead, else back to its lane. A row whose
-- counts HINCRBY would refuse goes dead as malformed instead of stopping the reaper.
local function stall(id, now, maxlen, why)
  local jk = job_key(id)
  local row = redis.call('HMGET', jk, 'lane', 'failures', 'stalls', 'max', 'load', 'pri')
  local lane = row[1] or ''
  local failures, stalls, max = count(row[2], 0), count(row[3], 0), count(row[4], DEFAULT_MAX_ATTEMPTS)
  if failures == nil or stalls == nil or max == nil then
    unlease(id, jk)
    to_dead(id, jk, lane, now, DEAD_MALFORMED)
    emit(maxlen, 'type', 'dead', 'job_id', id, 'lane', lane, 'reason', DEAD_MALFORMED)
    return
  end
  stalls = redis.call('HINCRBY', jk, 'stalls', 1)
  unlease(id, jk)
  redis.call('HINCRBY', K_COUNTERS, 'reaped', 1)
  emit(maxlen, 'type', 'reaped', 'job_id', id, 'lane', lane, 'why', why)
  if failures + stalls >= max then
    to_dead(id, jk, lane, now, 'lease expired too often')
    emit(maxlen, 'type', 'dead', 'job_id', id, 'lane', lane, 'reason', 'lease expired too often')
  else
    place(id, lane, false, row[5], tonumber(row[6] or '0') or 0)
  end
end

-- The guard every fenced call starts with: the job is active, `token` is current and,
-- when the caller names its lease (`lid`, the claim id its claim returned; '' = a bare
-- attempts token), the lease is that one. attempts alone can be issued twice after data
-- loss (a claim lost with an `everysec` crash or an asynchronous failover: the next claim
-- bumps attempts to the same number); the claim id is minted by the client, so it never is.
local function holds(jk, token, lid)
  local row = redis.call('HMGET', jk, 'state', 'attempts', 'lid')
  return row[1] == 'active' and row[2] == token
    and (lid == nil or lid == '' or row[3] == lid)
end
