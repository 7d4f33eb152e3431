--[[ resume: let claims hand out jobs again (Queue.resume) and wake a parked consumer.

  The wake token reaches one parked consumer; its claim passes the token on while work
  is left (claim.lua, lane_claim.lua), so every parked consumer resumes within one wake.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  Returns  1 resumed now | 0 was not paused (a wake is pushed all the same)
  Events   none
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_PAUSED, K_COUNTERS, K_WAKE = unpack(KEYS, 2, 4)
--@include common

local was = redis.call('DEL', K_PAUSED)
if was == 1 then
  redis.call('HINCRBY', K_COUNTERS, 'resumes', 1)
end
wake()
return was
