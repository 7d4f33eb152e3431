--[[ schedule_due: what a scheduler needs for its turn, read on the server clock.

  KEYS[1]  prefix    "emq:{q}:"
  KEYS[2..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  limit     at most this many due schedules

  Returns {now, the earliest next due time after now (-1: none, or all paused), name,
  next, cron, ...} with the due schedules (next <= now), earliest first. Changes nothing.
]]
local K_SCHEDULES = KEYS[2]
--@include common

local now = server_now()
local later = redis.call('ZRANGE', K_SCHEDULES, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1,
  'WITHSCORES')
local out = {now, -1}
if later[1] and later[2] ~= 'inf' then
  out[2] = tonumber(later[2])
end
local due = redis.call('ZRANGE', K_SCHEDULES, '-inf', now, 'BYSCORE', 'LIMIT', 0,
  tonumber(ARGV[1]), 'WITHSCORES')
for i = 1, #due, 2 do
  out[#out + 1] = due[i]
  out[#out + 1] = due[i + 1]
  out[#out + 1] = redis.call('HGET', PREFIX .. 'schedule:' .. due[i], 'cron') or ''
end
return out
