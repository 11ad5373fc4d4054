-- Token-checked release of a fair lock on one node, handing the turn on.
-- KEYS[1] = lock key, KEYS[2] = the queue, KEYS[3] = the leases (as
-- enter.lua). ARGV[1] = token. ARGV[2], if given, is the channel on which
-- the waiter now first in line is told its turn came: the message is its
-- id, and only that waiter tries (one per node that released; the same
-- waiter on every node, since the line has one order).
-- Returns 1 if the key held the token and was deleted, 0 otherwise.
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then
  if not string.find(value.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply(value.err)
  end
  return 0
end
if value ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  local ends = first and tonumber(redis.call('ZSCORE', KEYS[3], first))
  if ends and ends > now then
    -- Best effort: the key is gone either way.
    redis.pcall('PUBLISH', ARGV[2], first)
  end
end
return 1
