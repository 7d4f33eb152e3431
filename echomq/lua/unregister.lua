--[[ unregister: a worker leaves the registry on a clean stop.

  Jobs it still holds (there should be none after a clean stop) keep their lease and
  come back when it expires. If it held the queue's reaper lock, the lock is freed so
  another reaper takes over at once.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  worker   hash
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  worker id

  Returns  1 if it was registered, else 0
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_WORKERS, K_REAPER = unpack(KEYS, 3, 4)
--@include common

local n = redis.call('ZREM', K_WORKERS, ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'stopped', server_now())
end
if redis.call('GET', K_REAPER) == ARGV[1] then
  redis.call('DEL', K_REAPER)
end
return n
