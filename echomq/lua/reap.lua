--[[ reap: return presumed-dead holders' jobs to their lanes (Stalled.reap).

  Two ways a holder is presumed dead, both judged on the server clock:
    * its lease deadline passed (the floor: works even without heartbeats);
    * its worker's heartbeat deadline passed (early: a killed worker's jobs come back
      after the heartbeat lapse, not after the whole lease). Fencing keeps this safe:
      a holder that was only slow finds its token stale.
  Also promotes due scheduled jobs, so retries flow even when no consumer claims.

  KEYS[1]  prefix   "emq:{q}:"

  ARGV[1]  limit          at most this many expired leases, and this many lapsed workers
  ARGV[2]  events_maxlen

  Returns  the ids moved (to their lane, or to dead when out of deliveries)
  Events   reaped {job_id, lane, why}; dead {job_id, lane, reason} when out of deliveries
]]
--@include common

local limit, maxlen = tonumber(ARGV[1]), ARGV[2]
local now = server_now()
promote(now, limit)

local moved = {}
local expired = redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  stall(id, now, maxlen, 'lease expired')
  moved[#moved + 1] = id
end

local lapsed = redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', now, 'LIMIT', 0, limit)
for _, worker in ipairs(lapsed) do
  local wk = wjobs_key(worker)
  for _, id in ipairs(redis.call('SMEMBERS', wk)) do
    local row = redis.call('HMGET', job_key(id), 'state', 'worker')
    if row[1] == 'active' and row[2] == worker then
      stall(id, now, maxlen, 'worker lapsed')
      moved[#moved + 1] = id
    end
  end
  redis.call('DEL', wk)
  redis.call('ZREM', K_WORKERS, worker)
  redis.call('HSET', PREFIX .. 'worker:' .. worker, 'lapsed', now)
end
if #lapsed > 0 then
  redis.call('HINCRBY', K_COUNTERS, 'lapsed_workers', #lapsed)
end
return moved
