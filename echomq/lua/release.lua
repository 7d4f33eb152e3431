--[[ release: hand an active job back to its lane without spending a delivery.

  The token is bumped, so the releasing holder (or anyone still holding the old token)
  can no longer complete, fail or extend it.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash

  ARGV[1]  job id
  ARGV[2]  token

  Returns  1 back on its lane | 0 stale
  Events   none
]]
--@include common

local id, token = ARGV[1], ARGV[2]
local jk = KEYS[2]
if not holds(jk, token) then
  redis.call('HINCRBY', K_REFUSED, 'release', 1)
  return 0
end
unlease(id, jk)
redis.call('HINCRBY', jk, 'attempts', 1)
redis.call('HINCRBY', K_COUNTERS, 'released', 1)
place(id, redis.call('HGET', jk, 'lane'))
return 1
