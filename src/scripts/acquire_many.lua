-- Multi-resource acquire: every key or none, atomically on this node.
-- KEYS = the lock keys; ARGV[1] = token, ARGV[2] = ttl in ms.
-- Returns 1 when all keys were set, 0 when any of them exists (whatever its
-- type), in which case nothing was written.
for _, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return 1
