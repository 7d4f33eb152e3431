--[[ lane_claim: lease up to N jobs, one lane at a time, in fair order (Lanes.claim).

  Two lists hold exactly the non-empty lanes, each lane in one of them, once:
    new   lanes activated by a job arriving while they were empty (place(), common.lua)
    ring  lanes still non-empty after a claim, served round-robin
  Each step takes one lane and leases its first job (its highest priority, the oldest
  among equals: a lane's score is -priority, its members mint-ordered ids): from `new` first (sparse lanes
  first, as fq_codel / DRR++ serve new flows), except that right after a step served
  `new` the next step serves the ring when it has a lane, so the two alternate while
  both are non-empty. A lane that still has jobs after its step joins the ring's tail;
  an emptied one leaves. `owed` carries "the last step served `new`" from one call to
  the next, so a batch of N steps orders jobs exactly as N single claims would.
  Bounds (proofs in docs/load.md, "Fair order: sparse lanes first"): a lane at position
  p of the ring is claimed within 2p steps, p <= number of non-empty lanes; an activation
  with k activations ahead of it in `new` is claimed within 2(k + 1) steps.

  The steps are played in Lua over what the lists and lanes hold, then written once per
  structure: `new` and the ring are read from their heads in chunks of N (LRANGE) and
  trimmed once (LTRIM), the lanes re-joining the ring are appended in one RPUSH (a step
  that finds the ring's stored lanes used up serves those re-joined ones next, as
  LPOP after RPUSH would), a lane's depth is read once (ZCARD) and its jobs popped in one
  ZPOPMIN of as many as its steps took, and the running count `inlanes` drops once. So a
  batch costs O(1) commands per lane it serves, whatever N, and orders jobs exactly as
  the step-by-step pops did.

  KEYS[1]  prefix   "emq:{q}:"   (lane:<name>, job:<id> are built from it: named by data)
  KEYS[2]  held     set      the worker's job set (wjobs:<worker id>)
  KEYS[3]  holder   hash     the worker's description (worker:<worker id>)
  KEYS[4]  memo     string   the ids this call leased (claim:<claim id>)
  KEYS[5..] the static keys below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  worker id
  ARGV[2]  lease_ms
  ARGV[3]  count
  ARGV[4]  promote_limit
  ARGV[5]  claim id        minted by the client per call ('' = none): names the leases
                           (each row's `lid`, returned as the token's holder part) and lets a
                           re-run of the same call (a retry after a lost reply) answer the
                           batch the first run leased instead of leasing another
  ARGV[6]  memo_ms         how long the ids leased are remembered for such a re-run

  Returns  {server_now, next_due | -1, {id, lane, payload, token, lease_until, seq, enqueued_at, stalls, headers, claim id}...}
  Checks   before the first write: the worker's job set and the memo key hold what the
           script writes there (else an error, nothing changed); every popped row is
           checked in lease_all before any is leased
  Events   none
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_HELD, K_HOLDER, K_MEMO = KEYS[2], KEYS[3], KEYS[4]
local K_NEW, K_RING, K_OWED, K_PENDING, K_ACTIVE, K_SCHEDULED, K_DEAD, K_COUNTERS, K_EVENTS, K_WAKE, K_WORKERS, K_INLANES, K_FOREIGN, K_PAUSED = unpack(KEYS, 5, 18)
--@include common

local worker, lease_ms, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local claim_id, memo_ms = ARGV[5] or '', tonumber(ARGV[6] or '0')
local now, reply = claim_begin(worker, claim_id, tonumber(ARGV[4]))
if not now then return reply end

local out = {now, next_due()}

-- A list consumed from its head without a write: read in chunks, trimmed once at the end.
local function reader(key)
  return {key = key, buf = {}, at = 1, off = 0, ended = false}
end
local function take(r)
  if r.at > #r.buf then
    if r.ended then return false end
    r.buf = redis.call('LRANGE', r.key, r.off, r.off + count - 1)
    r.off, r.at = r.off + #r.buf, 1
    r.ended = #r.buf < count
    if #r.buf == 0 then return false end
  end
  r.at = r.at + 1
  return r.buf[r.at - 1]
end
local function taken(r) return r.off - (#r.buf - r.at + 1) end
local function has_more(r)
  if r.at <= #r.buf then return true end
  if r.ended then return false end
  return redis.call('LLEN', r.key) > r.off
end

local new_r, ring_r = reader(K_NEW), reader(K_RING)
local back, back_at = {}, 1  -- lanes re-joining the ring's tail, in order
local function take_ring()
  local lane = take(ring_r)
  if lane then return lane end
  if back_at <= #back then
    back_at = back_at + 1
    return back[back_at - 1]
  end
  return false
end

local depth, took, served, visits = {}, {}, {}, {}
local was_owed = redis.call('GET', K_OWED) == '1'
local owed = was_owed
local new_left = true  -- nothing joins `new` during the loop: once empty, it stays so
while #visits < count do
  local lane, fresh = false, false
  if new_left and not owed then
    lane = take(new_r)
    fresh = lane ~= false
    new_left = fresh
  end
  if not lane then
    lane = take_ring()
    if not lane and owed and new_left then
      lane = take(new_r)  -- the ring is empty: nothing is owed to it
      fresh = lane ~= false
      new_left = fresh
    end
  end
  if not lane then break end
  local left = depth[lane]
  if left == nil then left = redis.call('ZCARD', lane_key(lane)) end
  if left > 0 then
    if not took[lane] then
      took[lane] = 0
      served[#served + 1] = lane
    end
    took[lane] = took[lane] + 1
    visits[#visits + 1] = lane
    left = left - 1
  end
  depth[lane] = left
  if left > 0 then
    back[#back + 1] = lane
  end
  owed = fresh
end

-- The steps' writes, once per structure. The first jobs of each lane served (highest
-- priority, then oldest), in the order its steps took them.
local popped = {}
for _, lane in ipairs(served) do
  popped[lane] = redis.call('ZPOPMIN', lane_key(lane), took[lane])
end
local ids, nth = {}, {}
for i, lane in ipairs(visits) do
  nth[lane] = (nth[lane] or 0) + 1
  ids[i] = popped[lane][2 * nth[lane] - 1]
end
local more = has_more(new_r) or has_more(ring_r) or back_at <= #back
if taken(new_r) > 0 then redis.call('LTRIM', K_NEW, taken(new_r), -1) end
if taken(ring_r) > 0 then redis.call('LTRIM', K_RING, taken(ring_r), -1) end
for first = back_at, #back, 1000 do  -- unpack() is bounded by Lua's C stack: in slices
  redis.call('RPUSH', K_RING, unpack(back, first, math.min(first + 999, #back)))
end
if #ids > 0 then
  redis.call('DECRBY', K_INLANES, #ids)
end
if owed ~= was_owed then
  if owed then redis.call('SET', K_OWED, '1') else redis.call('DEL', K_OWED) end
end
for _, claim in ipairs(lease_all(ids, worker, now, lease_ms, claim_id, memo_ms)) do
  out[#out + 1] = claim
end
if more then
  wake()
else
  -- No lane holds a job, so the running count is 0 and so is every lane's foreign count:
  -- dropping them here heals a count that drifted (jobs left in lanes by a version of
  -- EchoMQ that kept no count; a row deleted under the queue, popped and dropped).
  redis.call('DEL', K_INLANES, K_FOREIGN)
end
return out
