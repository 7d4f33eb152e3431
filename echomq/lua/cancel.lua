--[[ cancel: take a job out of wherever it waits or runs, for good (Jobs.cancel).

  A waiting job (the plain pending set or its lane), a delayed or retrying one (scheduled)
  or a running one (active) becomes `cancelled`; a finished, dead or already cancelled job
  (or no job) is left as it is. Every structure the job sat in is kept exact: the lane's
  depth and the running count `inlanes`, the lane's foreign count, the load subject's open
  index, the holder's job set. A lane the cancel empties leaves `new` and the ring, where
  only non-empty lanes may be (lane_claim), so its next arrival activates it once; that
  LREM costs O(non-empty lanes), paid only by a cancel that empties a lane.

  A running job's holder is told by the fence: its complete, fail, extend, release or
  progress finds the job no longer active and is refused (its consumer's next lease renewal
  cancels the handler). A cancelled job's location is the `cancelled` set (score: when),
  kept as completed rows are: each cancel trims up to TRIM_BATCH of the oldest rows beyond
  `keep_count` or older than `keep_ms`, so memory stays bounded and no call does more.

  KEYS[1]  prefix   "emq:{q}:"   (lane:<name>, open:<name>, wjobs:<id> are built from it)
  KEYS[2]  job      hash
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  job id
  ARGV[2]  events_maxlen
  ARGV[3]  keep_count     cancelled rows retained (Settings.keep_completed)
  ARGV[4]  keep_age_ms    cancelled rows older than this are trimmed (keep_completed_ms)

  Returns  1 cancelled | 0 nothing changed (no such job, finished, dead or cancelled)
  Events   cancelled {job_id, lane, was}  (was: the state it left)
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_RING, K_PENDING, K_ACTIVE, K_SCHEDULED, K_CANCELLED, K_COUNTERS, K_EVENTS, K_INLANES, K_FOREIGN = unpack(KEYS, 3, 12)
--@include common
--@include retain

local id, jk = ARGV[1], KEYS[2]
local row = redis.call('HMGET', jk, 'state', 'lane', 'load', 'enq')
-- A pending row has no state, but every row has `enq`.
if not (row[1] or row[4]) then return 0 end
local state, lane, load = row[1] or 'pending', row[2] or '', row[3]
if state ~= 'pending' and state ~= 'scheduled' and state ~= 'active' then return 0 end

-- All checks passed; writes start here.
local now = server_now()
if state == 'pending' then
  if lane == '' then
    redis.call('ZREM', K_PENDING, id)
  else
    local lk = lane_key(lane)
    if redis.call('ZREM', lk, id) == 1 then
      if redis.call('DECR', K_INLANES) < 0 then redis.call('SET', K_INLANES, 0) end
      if load and redis.call('HINCRBY', K_FOREIGN, lane, -1) <= 0 then
        redis.call('HDEL', K_FOREIGN, lane)
      end
      if redis.call('ZCARD', lk) == 0 then
        redis.call('LREM', K_NEW, 0, lane)
        redis.call('LREM', K_RING, 0, lane)
      end
    end
    -- A job counted against another subject is in that subject's index while it waits.
    unload(id, jk, lane)
  end
elseif state == 'scheduled' then
  redis.call('ZREM', K_SCHEDULED, id)
  redis.call('HDEL', jk, 'due')
  unload(id, jk, lane)
else
  unlease(id, jk)
  unload(id, jk, lane)
end
redis.call('HSET', jk, 'state', 'cancelled', 'done', now)
redis.call('ZADD', K_CANCELLED, now, id)
redis.call('HINCRBY', K_COUNTERS, 'cancelled', 1)
emit(ARGV[2], 'type', 'cancelled', 'job_id', id, 'lane', lane, 'was', state)

local TRIM_BATCH = 8
trim_kept(K_CANCELLED, now, tonumber(ARGV[3]), tonumber(ARGV[4]), TRIM_BATCH)
return 1
