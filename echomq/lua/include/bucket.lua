-- Token buckets on the server clock, spliced in with `--@include bucket` (lane_enqueue's
-- rate limit, and an application's own scripts through echomq.scripts). One layout:
--   hash {tokens, ts}   tokens: the level after the last take (decimal)
--                       ts:     server ms of that take
--   absent = a full bucket: the key expires once refilled, so an idle subject leaves
--   nothing behind.
-- Refill: `elapsed * rate / 1000` tokens (rate a second), up to `burst`. A clock step
-- back refills nothing. No key of its own and no clock of its own: the caller passes the
-- bucket's key and the server's `now` (one TIME per script).

-- The bucket's level at `now`, and the ms until one token is due (0 = one is there).
-- Reads only: a caller with more checks to run peeks first and takes after them.
-- `at_ms` is read where `ts` is missing: an earlier layout's name for it, kept so a bucket
-- written before an upgrade keeps its time (such a hash expires within burst / rate + 1 s).
local function bucket_peek(key, rate, burst, now)
  local b = redis.call('HMGET', key, 'tokens', 'ts', 'at_ms')
  local tokens = burst
  if b[1] then
    local ts = tonumber(b[2] or b[3] or '') or now
    tokens = math.min(burst, tonumber(b[1]) + math.max(0, now - ts) * rate / 1000)
  end
  if tokens < 1 then
    return tokens, math.max(1, math.ceil((1 - tokens) * 1000 / rate))
  end
  return tokens, 0
end

-- Take one token from a bucket `bucket_peek` found at `tokens` (>= 1) at `now`.
local function bucket_take(key, tokens, rate, burst, now)
  tokens = tokens - 1
  redis.call('HSET', key, 'tokens', tostring(tokens), 'ts', now)
  -- gone once full again: then the key would say nothing a missing one does not
  redis.call('PEXPIRE', key, math.max(1, math.ceil((burst - tokens) * 1000 / rate)))
end
