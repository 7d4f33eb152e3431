--[[ stats: one consistent snapshot of the queue's locations and counters (read only).

  KEYS[1]  prefix   "emq:{q}:"
  ARGV[1]  max lanes listed

  Returns  {pending (plain + lanes), active, scheduled, completed, dead,
            {lane, depth, ...}, {counter, value, ...}, {refused_op, n, ...}, server_now}
]]
--@include common

local lanes, in_lanes, listed = {}, 0, tonumber(ARGV[1])
for i, lane in ipairs(redis.call('LRANGE', K_RING, 0, -1)) do
  local depth = redis.call('ZCARD', lane_key(lane))
  in_lanes = in_lanes + depth
  if i <= listed then
    lanes[#lanes + 1] = lane
    lanes[#lanes + 1] = depth
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
