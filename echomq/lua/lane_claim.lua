--[[ lane_claim: lease up to N jobs, one lane at a time, round-robin (Lanes.claim).

  The ring is a list of exactly the non-empty lanes. Each step pops the lane at its
  head, leases that lane's oldest job, and pushes the lane to the tail if it still has
  jobs: O(1) ring moves per job, so a lane with 100,000 jobs and a lane with one are
  served alternately.

  KEYS[1]  prefix   "emq:{q}:"

  ARGV[1]  worker id
  ARGV[2]  lease_ms
  ARGV[3]  count
  ARGV[4]  promote_limit

  Returns  {server_now, next_due | -1, {id, lane, payload, token, lease_until, seq, enqueued_at, stalls}...}
  Events   none
]]
--@include common

local worker, lease_ms, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = server_now()
promote(now, tonumber(ARGV[4]))

local out = {now, next_due()}
local ids = {}
while #ids < count do
  local lane = redis.call('LPOP', K_RING)
  if not lane then break end
  local lk = lane_key(lane)
  local popped = redis.call('ZPOPMIN', lk)
  if redis.call('ZCARD', lk) > 0 then
    redis.call('RPUSH', K_RING, lane)
  end
  if #popped > 0 then
    ids[#ids + 1] = popped[1]
  end
end
for _, claim in ipairs(lease_all(ids, worker, now, lease_ms)) do
  out[#out + 1] = claim
end
if redis.call('LLEN', K_RING) > 0 then wake() end
return out
