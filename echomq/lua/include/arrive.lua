-- A new plain job's row and its place (enqueue.lua, enqueue_many.lua).
--
-- The row, in one HSET: what no default covers. No `id` (the key holds it), no `lane`
-- (the plain queue has none), no `max` at its default (DEFAULT_MAX_ATTEMPTS), no counts
-- at 0 (readers take a missing count as 0), no `pri` at 0, no state while pending.
-- `due` > 0: scheduled until then (server clock), else pending now.
local function arrive(jk, id, body, max, attempts, headers, pri, due, now)
  local row = {'body', body, 'enq', now}
  if tonumber(max) ~= DEFAULT_MAX_ATTEMPTS then
    put(row, 'max', max)
  end
  if attempts ~= '0' then
    put(row, 'attempts', attempts)
  end
  if (headers or '') ~= '' then
    put(row, 'headers', headers)
  end
  if pri ~= 0 then
    put(row, 'pri', pri)
  end
  if due > 0 then
    put(row, 'state', 'scheduled')
    put(row, 'due', due)
  end  -- else pending: a row with no `state` (include/common.lua, place)
  redis.call('HSET', jk, unpack(row))
  if due > 0 then
    redis.call('ZADD', K_SCHEDULED, due, id)
    -- A parked consumer must shorten its sleep to the new due time.
    wake()
  else
    place(id, '', true, false, pri)
  end
end
