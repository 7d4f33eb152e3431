--[[ claim: lease up to N of the oldest pending jobs of the plain queue (Jobs.claim).

  KEYS[1]  prefix   "emq:{q}:"

  ARGV[1]  worker id       holder of the new leases
  ARGV[2]  lease_ms        lease length; deadline = server TIME + lease_ms
  ARGV[3]  count           at most this many jobs
  ARGV[4]  promote_limit   due scheduled jobs moved back before popping

  Returns  {server_now, next_due | -1, {id, lane, payload, token, lease_until, seq, enqueued_at, stalls, headers}...}
  Events   none
]]
--@include common

local worker, lease_ms, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = server_now()
promote(now, tonumber(ARGV[4]))

local out = {now, next_due()}
local popped = redis.call('ZPOPMIN', K_PENDING, count)
local ids = {}
for i = 1, #popped, 2 do
  ids[#ids + 1] = popped[i]
end
for _, claim in ipairs(lease_all(ids, worker, now, lease_ms)) do
  out[#out + 1] = claim
end
-- More work left: pass the wake token on to the next parked consumer.
if redis.call('ZCARD', K_PENDING) > 0 then wake() end
return out
