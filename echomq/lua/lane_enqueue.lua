--[[ lane_enqueue: add a job to a fair lane (claimed round-robin across lanes).

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash     the new job's row
  KEYS[3]  lane     zset     the lane's pending jobs (score 0, mint order)
  KEYS[4]  seq      string   sequence counter of (lane, scope); unused when ARGV[7] = 0

  ARGV[1]  job id
  ARGV[2]  lane name
  ARGV[3]  payload
  ARGV[4]  max_attempts
  ARGV[5]  max_pending      refuse when the lane already holds this many unfinished jobs
                            (pending + active + scheduled); 0 = no limit
  ARGV[6]  deadline_ms      refuse when server now >= this; 0 = no deadline
  ARGV[7]  use_seq          1 = number the job within (lane, scope), atomically
  ARGV[8]  seq_ttl_ms       lifetime of the sequence counter
  ARGV[9]  attempts         initial fencing token

  Returns  {1, id, seq}   created (seq = -1 without use_seq)
           {0, id, seq}   the id exists: nothing changed, its original seq
           {-1, limit}    lane full: nothing changed
           {-2, now}      deadline passed: nothing changed
]]
--@include common

local id, lane = ARGV[1], ARGV[2]
local jk = KEYS[2]
if redis.call('EXISTS', jk) == 1 then
  return {0, id, tonumber(redis.call('HGET', jk, 'seq') or '-1')}
end

local now = server_now()
local deadline = tonumber(ARGV[6])
if deadline > 0 and now >= deadline then
  return {-2, now}
end
local limit = tonumber(ARGV[5])
if limit > 0 and tonumber(redis.call('HGET', K_LANELOAD, lane) or '0') >= limit then
  return {-1, limit}
end

-- All checks passed; writes start here.
local seq = -1
if ARGV[7] == '1' then
  seq = redis.call('INCR', KEYS[4]) - 1
  redis.call('PEXPIRE', KEYS[4], ARGV[8])
end
redis.call('HSET', jk, 'id', id, 'lane', lane, 'payload', ARGV[3], 'max', ARGV[4],
  'attempts', ARGV[9], 'failures', 0, 'stalls', 0, 'enq', now, 'state', 'pending')
if seq >= 0 then
  redis.call('HSET', jk, 'seq', seq)
end
redis.call('HINCRBY', K_LANELOAD, lane, 1)
redis.call('HINCRBY', K_COUNTERS, 'enqueued', 1)
place(id, lane, true)
return {1, id, seq}
