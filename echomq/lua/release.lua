--[[ release: hand an active job back to its lane without spending a delivery.

  The token is left as it is: `attempts` counts deliveries, and the next claim makes it
  token + 1. The releasing holder (or anyone still holding the old token) is fenced off
  all the same, because every fenced call needs the job active and a released job is
  pending.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  job id
  ARGV[2]  token
  ARGV[3]  worker id (optional) the job must also be leased to this worker, or the call is
           stale: a caller that only read the token from the row (e.g. a consumer handing
           back the jobs a lost claim answer leased it) never releases another's lease

  ARGV[4]  lease id   the lease the caller holds (the claim id of its claim, the token's
                          `lease`); '' = a bare attempts token: state and attempts only

  Returns  1 back on its lane | 0 stale
  Events   none
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_PENDING, K_ACTIVE, K_COUNTERS, K_REFUSED, K_WAKE, K_INLANES, K_FOREIGN = unpack(KEYS, 3, 10)
--@include common

local id, token = ARGV[1], ARGV[2]
local jk = KEYS[2]
local worker = ARGV[3]
if not holds(jk, token, ARGV[4])
    or (worker and worker ~= '' and redis.call('HGET', jk, 'worker') ~= worker) then
  redis.call('HINCRBY', K_REFUSED, 'release', 1)
  return 0
end
unlease(id, jk)
redis.call('HINCRBY', K_COUNTERS, 'released', 1)
local row = redis.call('HMGET', jk, 'lane', 'load')
place(id, row[1], false, row[2])
return 1
