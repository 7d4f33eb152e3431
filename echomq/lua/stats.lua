--[[ stats: one consistent snapshot of the queue's locations and counters (read only).

  KEYS[1]  prefix   "emq:{q}:"
  ARGV[1]  max lanes listed

  Returns  {pending (plain + lanes), active, scheduled, completed, dead,
            {lane, depth, ...}, {counter, value, ...}, {refused_op, n, ...}, server_now}
]]
--@include common

-- The non-empty lanes are exactly those in `new` and the ring, each once: activations
-- listed first, then the ring.
local lanes, in_lanes, listed, seen = {}, 0, tonumber(ARGV[1]), 0
for _, list in ipairs({K_NEW, K_RING}) do
  for _, lane in ipairs(redis.call('LRANGE', list, 0, -1)) do
    local depth = redis.call('ZCARD', lane_key(lane))
    in_lanes = in_lanes + depth
    seen = seen + 1
    if seen <= listed then
      lanes[#lanes + 1] = lane
      lanes[#lanes + 1] = depth
    end
  end
end
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
}
