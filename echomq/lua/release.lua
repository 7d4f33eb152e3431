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
  ARGV[5]  bound      (optional) a hand-back for `Unavailable`: the job's strikes at which
                      it is not released but left active for the caller to fail. A strike
                      is such a hand-back with a completion of any job since the job's last
                      one (row `ubk`: the queue's `completed` counter then; `ubs`: strikes),
                      so an outage, where nothing completes, strikes nobody however long

  Returns  1 back on its lane | 0 stale | 2 out of hand-backs: still active under the token
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
local bound = tonumber(ARGV[5] or '')
if bound then
  local marks = redis.call('HMGET', jk, 'ubk', 'ubs')
  local done = tonumber(redis.call('HGET', K_COUNTERS, 'completed') or '0') or 0
  local strikes = count(marks[2], 0) or 0
  if marks[1] and done > (tonumber(marks[1]) or done) then strikes = strikes + 1 end
  redis.call('HSET', jk, 'ubk', string.format('%d', done), 'ubs', strikes)
  if strikes >= bound then return 2 end
end
unlease(id, jk)
redis.call('HINCRBY', K_COUNTERS, 'released', 1)
local row = redis.call('HMGET', jk, 'lane', 'load')
place(id, row[1], false, row[2])
return 1
