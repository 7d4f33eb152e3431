-- Retention of finished rows (completed, cancelled), spliced after common.lua.
--
-- Drop up to `most` of the oldest members of the set `key` (scored by when they finished)
-- beyond `keep_count` or older than `keep_age_ms`, with their rows: memory stays bounded,
-- and no single call does more than its `most`.
local function trim_kept(key, now, keep_count, keep_age_ms, most)
  local old = redis.call('ZRANGEBYSCORE', key, '-inf', now - keep_age_ms, 'LIMIT', 0, most)
  local excess = redis.call('ZCARD', key) - keep_count
  if excess > #old then
    -- the oldest `excess` rows include every aged one: both sets start at the low end
    old = redis.call('ZRANGE', key, 0, math.min(excess, most) - 1)
  end
  for first = 1, #old, 1000 do  -- unpack() is bounded by Lua's C stack: in slices
    local last = math.min(first + 999, #old)
    redis.call('ZREM', key, unpack(old, first, last))
    local rows = {}
    for i = first, last do rows[#rows + 1] = job_key(old[i]) end
    redis.call('DEL', unpack(rows))
  end
end
