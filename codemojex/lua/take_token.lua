--[[ take_token: one token from a bucket refilled at `rate` a second, on the server clock.

  The bucket is echomq's (include/bucket.lua), the very one lane_enqueue keeps per rate
  subject: one layout and one refill rule for every rate limit of the game.

  KEYS[1]  bucket   hash {tokens, ts}; gone when idle long enough to be full again

  ARGV[1]  rate     tokens a second (> 0)
  ARGV[2]  burst    capacity (>= 1)

  Returns  {1, 0}              taken
           {0, retry_after_ms} empty: nothing changed; one token is back after that long
]]
--@include bucket
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tokens, retry_ms = bucket_peek(KEYS[1], rate, burst, now)
if retry_ms > 0 then
  return {0, retry_ms}
end
bucket_take(KEYS[1], tokens, rate, burst, now)
return {1, 0}
