-- Election: who holds the lock key on this node, and what it proclaimed,
-- read in one atomic step.
-- KEYS[1] = lock key, KEYS[2] = leader key (see elect_proclaim.lua).
-- Returns {} when the lock key is absent (or not a string); {token} when
-- the leader key holds nothing of that token (not written yet, or the node
-- restarted empty and a renewal restored the lock); otherwise
-- {token, term, rev, value}.
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' and holder.err then
  if not string.find(holder.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply(holder.err)
  end
  return {}
end
if not holder then
  return {}
end
local record = redis.pcall('HMGET', KEYS[2], 'token', 'term', 'rev', 'value')
if type(record) == 'table' and record.err then
  if not string.find(record.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply(record.err)
  end
  return {holder}
end
if record[1] ~= holder or not record[2] or not record[3] or not record[4] then
  return {holder}
end
return {holder, record[2], record[3], record[4]}
