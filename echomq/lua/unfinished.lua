--[[ unfinished: a load subject's unfinished jobs, counted and listed (Lanes.load,
  Lanes.unfinished; read only).

  A subject's unfinished jobs are its open index (active and scheduled jobs of its own
  lane, and every unfinished job counted against it from another lane) and the jobs
  waiting in its own lane, less those of them counted against another subject (K_FOREIGN):
  include/common.lua, open_key. One script, so no job moving between its lane and the
  index (a claim, a release) is seen twice or missed.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  open     zset   the subject's open index
  KEYS[3]  lane     zset   the subject's own lane
  KEYS[4..] the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  subject
  ARGV[2]  limit    list at most this many of the index's oldest and of the lane's oldest
                    own jobs (the oldest `limit` unfinished jobs are among them); 0 = count

  Returns  {count, id...}  the ids unsorted: the caller orders them by their rows' enqueue
                           time (the lane holds its jobs in mint order, the index by time)
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_FOREIGN = unpack(KEYS, 4, 4)
--@include common

local subject, limit = ARGV[1], tonumber(ARGV[2])
local out = {load_count(subject, KEYS[2], KEYS[3])}
if limit <= 0 then return out end
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, limit - 1)) do
  out[#out + 1] = id
end
-- The lane's own jobs, oldest first, skipping those counted against another subject
-- (none, unless the lane is shared: then it is read in chunks until `limit` are found).
local foreign = tonumber(redis.call('HGET', K_FOREIGN, subject) or '0') or 0
local found, at = 0, 0
while found < limit do
  local chunk = redis.call('ZRANGE', KEYS[3], at, at + limit - 1)
  for _, id in ipairs(chunk) do
    if found < limit and (foreign == 0 or redis.call('HEXISTS', job_key(id), 'load') == 0) then
      out[#out + 1] = id
      found = found + 1
    end
  end
  if #chunk < limit then break end
  at = at + limit
end
return out
