--[[ promote: move due scheduled jobs (delays, retries) back to their lane or pending.

  KEYS[1]  prefix   "emq:{q}:"
  ARGV[1]  limit

  Returns  {promoted, next_due | -1, server_now}
  Events   none
]]
--@include common

local now = server_now()
local n = promote(now, tonumber(ARGV[1]))
return {n, next_due(), now}
