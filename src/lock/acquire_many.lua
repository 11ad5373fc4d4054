-- Multi-resource acquire: every key or none, atomically on this node.
-- KEYS = the lock keys; ARGV[1] = token, ARGV[2] = ttl in ms.
-- Returns 1 when all keys were set, 0 when any of them holds another value
-- (whatever its type), in which case nothing was written. Keys that
-- already hold the token count as free: sent again after the connection
-- dropped, a grant that had landed is granted again.
for _, key in ipairs(KEYS) do
  local value = redis.pcall('GET', key)
  if value and value ~= ARGV[1] then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return 1
