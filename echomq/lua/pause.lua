--[[ pause: stop claims handing out jobs (Queue.pause); enqueues still land.

  A parked consumer is not woken: the claims it runs answer nothing and no due time, so
  it stays parked on the wake key until resume pushes the wake token.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  Returns  1 paused now | 0 already paused
  Events   none
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_PAUSED, K_COUNTERS = unpack(KEYS, 2, 3)
--@include common

if redis.call('SET', K_PAUSED, server_now(), 'NX') then
  redis.call('HINCRBY', K_COUNTERS, 'pauses', 1)
  return 1
end
return 0
