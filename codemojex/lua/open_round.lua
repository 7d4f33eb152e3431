--[[ open_round: the current round is `expected`; replace it with a new one (CAS).

  However many processes handle the close of round R (at-least-once), exactly one new
  round follows R: the first to swap `current` from R wins, the rest see it moved.

  KEYS[1]  current   string   id of the current round
  KEYS[2]  new       hash     the new round
  KEYS[3]  previous  hash     the round being closed (= KEYS[2] when there is none)

  ARGV[1]  expected        id of the round being closed, '' when none exists yet
  ARGV[2]  new round id
  ARGV[3]  length
  ARGV[4]  palette (JSON)
  ARGV[5]  secret (JSON)
  ARGV[6]  round_ms
  ARGV[7]  close job id    the delayed job that will close the new round
  ARGV[8]  tolerance_ms    a close handled later than this after closes_at was downtime:
                           the new round opens now instead of at the old close (no catch-up)

  Returns  {1, id, opens_at, closes_at, server_now} opened | {0, current_id, 0, 0, now}
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then
  return {0, current, 0, 0, now}
end
local opens = now
if ARGV[1] ~= '' then
  local prev_close = tonumber(redis.call('HGET', KEYS[3], 'closes_at') or '')
  if prev_close and now - prev_close <= tonumber(ARGV[8]) then
    opens = prev_close
  end
end
local closes = opens + tonumber(ARGV[6])
redis.call('HSET', KEYS[2], 'round_id', ARGV[2], 'length', ARGV[3], 'palette', ARGV[4],
  'secret', ARGV[5], 'opens_at', opens, 'closes_at', closes, 'close_job', ARGV[7],
  'prev', ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return {1, ARGV[2], opens, closes, now}
