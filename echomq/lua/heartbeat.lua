--[[ heartbeat: a worker says it is alive until server now + lapse_ms.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  worker   hash   the worker's self-description

  ARGV[1]  worker id
  ARGV[2]  lapse_ms    after this long without a beat the reaper reclaims its jobs
  ARGV[3]  ttl_ms      how long the description outlives the last beat
  ARGV[4..] field, value pairs (pid, host, …), stored on the worker hash

  Returns  server now (ms)
]]
--@include common

local now = server_now()
redis.call('ZADD', K_WORKERS, now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[2], 'beat', now, 'lapse_ms', ARGV[2])
redis.call('HDEL', KEYS[2], 'lapsed', 'stopped')
if #ARGV > 3 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 4))
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return now
