--[[ progress: a running job's handler reports how far it got (Claim.progress).

  Fenced as complete is: only the current holder (the job active, the token current, the
  lease its own) writes; a stale holder changes nothing but the refusal tally.

  KEYS[1]  prefix   "emq:{q}:"
  KEYS[2]  job      hash
  KEYS[3..]   the queue's static keys it unpacks below (echomq.keys.SCRIPT_KEYS)

  ARGV[1]  job id
  ARGV[2]  token
  ARGV[3]  lease id       the lease the caller holds ('' = a bare attempts token)
  ARGV[4]  progress       opaque string (JSON by convention), kept on the row as `progress`
  ARGV[5]  events_maxlen

  Returns  1 recorded | 0 stale: nothing changed but the refusal tally
  Events   progress {job_id, lane, attempts, progress}
]]
-- The static keys, after the call's own (echomq.keys.SCRIPT_KEYS).
local K_REFUSED, K_EVENTS = unpack(KEYS, 3, 4)
--@include common

local id, token, jk = ARGV[1], ARGV[2], KEYS[2]
if not holds(jk, token, ARGV[3]) then
  redis.call('HINCRBY', K_REFUSED, 'progress', 1)
  return 0
end
redis.call('HSET', jk, 'progress', ARGV[4])
emit(ARGV[5], 'type', 'progress', 'job_id', id, 'lane', redis.call('HGET', jk, 'lane') or '',
  'attempts', token, 'progress', ARGV[4])
return 1
