--[[ lane_claim: lease up to N jobs, one lane at a time, in fair order (Lanes.claim).

  Two lists hold exactly the non-empty lanes, each lane in one of them, once:
    new   lanes activated by a job arriving while they were empty (place(), common.lua)
    ring  lanes still non-empty after a claim, served round-robin
  Each step takes one lane and leases its oldest job: from `new` first (sparse lanes
  first, as fq_codel / DRR++ serve new flows), except that right after a step served
  `new` the next step serves the ring when it has a lane, so the two alternate while
  both are non-empty. A lane that still has jobs after its step joins the ring's tail;
  an emptied one leaves. `owed` carries "the last step served `new`" from one call to
  the next, so a batch of N steps orders jobs exactly as N single claims would.
  Bounds (proofs in docs/load.md, "Fair order: sparse lanes first"): a lane at position
  p of the ring is claimed within 2p steps, p <= number of non-empty lanes; an activation
  with k activations ahead of it in `new` is claimed within 2(k + 1) steps. Every step
  is O(1) list moves: at most two LPOPs, one ZPOPMIN, one RPUSH.

  KEYS[1]  prefix   "emq:{q}:"   (new, ring, owed and lane:<name> are built from it)

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
--@include common

local worker, lease_ms, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local claim_id, memo_ms = ARGV[5] or '', tonumber(ARGV[6] or '0')
local refused = claim_precheck(worker)
if refused then return refused end
local now = server_now()
local replayed = claim_replay(worker, claim_id)
if replayed then
  -- The same call again: its first run's reply was lost. Nothing is popped or leased.
  local out = {now, next_due()}
  for _, claim in ipairs(replayed) do out[#out + 1] = claim end
  redis.call('HINCRBY', K_COUNTERS, 'replayed', 1)
  return out
end
promote(now, tonumber(ARGV[4]))

local out = {now, next_due()}
local ids = {}
local was_owed = redis.call('GET', K_OWED) == '1'
local owed = was_owed
local new_left = true  -- nothing joins `new` during the loop: once empty, it stays so
while #ids < count do
  local lane, fresh = false, false
  if new_left and not owed then
    lane = redis.call('LPOP', K_NEW)
    fresh = lane ~= false
    new_left = fresh
  end
  if not lane then
    lane = redis.call('LPOP', K_RING)
    if not lane and owed and new_left then
      lane = redis.call('LPOP', K_NEW)  -- the ring is empty: nothing is owed to it
      fresh = lane ~= false
      new_left = fresh
    end
  end
  if not lane then break end
  local lk = lane_key(lane)
  local popped = redis.call('ZPOPMIN', lk)
  if redis.call('ZCARD', lk) > 0 then
    redis.call('RPUSH', K_RING, lane)
  end
  owed = fresh
  if #popped > 0 then
    ids[#ids + 1] = popped[1]
    redis.call('DECR', K_INLANES)
  end
end
if owed ~= was_owed then
  if owed then redis.call('SET', K_OWED, '1') else redis.call('DEL', K_OWED) end
end
for _, claim in ipairs(lease_all(ids, worker, now, lease_ms, claim_id, memo_ms)) do
  out[#out + 1] = claim
end
if redis.call('LLEN', K_RING) > 0 or redis.call('LLEN', K_NEW) > 0 then
  wake()
else
  -- No lane holds a job, so the running count is 0: dropping it here heals a count that
  -- drifted (jobs left in lanes by a version of EchoMQ that kept no count).
  redis.call('DEL', K_INLANES)
end
return out
