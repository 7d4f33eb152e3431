--[[ promote: move due scheduled jobs (delays, retries) back to their lane or pending.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)
  ARGV[1]  limit

  Returns  {promoted, next_due | -1, server_now}
  Events   none
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_PENDING, K_SCHEDULED, K_COUNTERS, K_WAKE, K_INLANES, K_FOREIGN = unpack(KEYS, 2, 8)
--@include common

local now = server_now()
local n = promote(now, tonumber(ARGV[1]))
return {n, next_due(), now}
