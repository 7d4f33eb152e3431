--[[ stats: one consistent snapshot of the queue's locations and counters (read only).

  Costs O(max lanes listed), whatever the number of lanes: the jobs waiting in lanes are a
  running count (place() / lane_claim), the number of non-empty lanes is the length of
  `new` plus the ring, and only the first `max lanes` of them are listed with depths.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)
  ARGV[1]  max lanes listed

  Returns  {pending (plain + lanes), active, scheduled, completed, dead,
            {lane, depth, ...}, {counter, value, ...}, {refused_op, n, ...}, server_now,
            non-empty lanes, paused (1 | 0)}
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_NEW, K_RING, K_PENDING, K_ACTIVE, K_SCHEDULED, K_COMPLETED, K_DEAD, K_COUNTERS, K_REFUSED, K_INLANES, K_PAUSED = unpack(KEYS, 2, 12)
--@include common

-- The non-empty lanes are exactly those in `new` and the ring, each once: activations
-- listed first, then the ring.
local lanes, left = {}, tonumber(ARGV[1])
for _, list in ipairs({K_NEW, K_RING}) do
  if left > 0 then
    for _, lane in ipairs(redis.call('LRANGE', list, 0, left - 1)) do
      lanes[#lanes + 1] = lane
      lanes[#lanes + 1] = redis.call('ZCARD', lane_key(lane))
      left = left - 1
    end
  end
end
local in_lanes = math.max(0, tonumber(redis.call('GET', K_INLANES) or '0'))
return {
  redis.call('ZCARD', K_PENDING) + in_lanes,
  redis.call('ZCARD', K_ACTIVE),
  redis.call('ZCARD', K_SCHEDULED),
  redis.call('ZCARD', K_COMPLETED),
  redis.call('ZCARD', K_DEAD),
  lanes,
  redis.call('HGETALL', K_COUNTERS),
  redis.call('HGETALL', K_REFUSED),
  server_now(),
  redis.call('LLEN', K_NEW) + redis.call('LLEN', K_RING),
  redis.call('EXISTS', K_PAUSED),
}
