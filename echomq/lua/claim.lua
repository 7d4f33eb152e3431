--[[ claim: lease up to N pending jobs of the plain queue, highest priority first and
  oldest first among equals (Jobs.claim). While the queue is paused: nothing, and no due
  time (-1), so the caller parks until resume's wake.

  KEYS[1]  prefix   "emq:{q}:"   (lane:<name>, job:<id> are built from it: named by data)
  KEYS[2]  held     set      the worker's job set (wjobs:<worker id>)
  KEYS[3]  holder   hash     the worker's description (worker:<worker id>)
  KEYS[4]  memo     string   the ids this call leased (claim:<claim id>)
  KEYS[5..] the static keys below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  worker id       holder of the new leases
  ARGV[2]  lease_ms        lease length; deadline = server TIME + lease_ms
  ARGV[3]  count           at most this many jobs
  ARGV[4]  promote_limit   due scheduled jobs moved back before popping
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
local K_NEW, K_PENDING, K_ACTIVE, K_SCHEDULED, K_DEAD, K_COUNTERS, K_EVENTS, K_WAKE, K_WORKERS, K_INLANES, K_FOREIGN, K_PAUSED = unpack(KEYS, 5, 16)
--@include common

local worker, lease_ms, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local claim_id, memo_ms = ARGV[5] or '', tonumber(ARGV[6] or '0')
local now, reply = claim_begin(worker, claim_id, tonumber(ARGV[4]))
if not now then return reply end

local out = {now, next_due()}
local popped = redis.call('ZPOPMIN', K_PENDING, count)
local ids = {}
for i = 1, #popped, 2 do
  ids[#ids + 1] = popped[i]
end
for _, claim in ipairs(lease_all(ids, worker, now, lease_ms, claim_id, memo_ms)) do
  out[#out + 1] = claim
end
-- More work left: pass the wake token on to the next parked consumer.
if redis.call('ZCARD', K_PENDING) > 0 then wake() end
return out
