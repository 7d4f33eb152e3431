--[[ take_token: one token from a bucket refilled at `rate` a second, on the server clock.

  KEYS[1]  bucket   hash {tokens, at_ms}; gone when idle long enough to be full again

  ARGV[1]  rate     tokens a second (> 0)
  ARGV[2]  burst    capacity (>= 1)

  Returns  {1, 0}              taken
           {0, retry_after_ms} empty: nothing changed; one token is back after that long
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local row = redis.call('HMGET', KEYS[1], 'tokens', 'at_ms')
local tokens = tonumber(row[1] or '') or burst
local at = tonumber(row[2] or '') or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
if tokens < 1 then
  return {0, math.ceil((1 - tokens) * 1000 / rate)}
end
tokens = tokens - 1
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at_ms', now)
-- Full again after (burst - tokens) / rate seconds: then the key says nothing new.
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
return {1, 0}
