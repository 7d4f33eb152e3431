--[[ extend: renew the lease of an active job still held under `token`.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  job id
  ARGV[2]  token
  ARGV[3]  lease_ms   new deadline = server TIME + lease_ms
  ARGV[4]  lease id   the lease the caller holds (the claim id of its claim, the token's
                          `lease`); '' = a bare attempts token: state and attempts only

  Returns  the new lease deadline (server ms) | 0 stale: the lease is lost
  Events   none
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_ACTIVE, K_REFUSED = unpack(KEYS, 3, 4)
--@include common

local id, token = ARGV[1], ARGV[2]
local jk = KEYS[2]
if not holds(jk, token, ARGV[4]) then
  redis.call('HINCRBY', K_REFUSED, 'extend', 1)
  return 0
end
local until_ms = server_now() + tonumber(ARGV[3])
redis.call('HSET', jk, 'lease', until_ms)
redis.call('ZADD', K_ACTIVE, until_ms, id)
return until_ms
