-- Fenced acquire, phase 1: SET NX PX the lock key and, only when that
-- succeeds, increment the fence counter that lives beside it.
-- KEYS[1] = lock key, KEYS[2] = fence counter key (never expires);
-- ARGV[1] = token, ARGV[2] = ttl in ms.
-- Returns the counter's new value (>= 1) when granted, 0 when the lock key
-- already exists (whatever its type: NX never touches an existing key).
-- Idempotent: sent again after the connection dropped, a grant that had
-- landed finds its own token and returns the counter it was granted.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return tonumber(redis.call('GET', KEYS[2]))
end
return 0
