-- Token-checked extend: reset the lock key's time-to-live only while it
-- holds our token. KEYS[1] = lock key, ARGV[1] = token, ARGV[2] = ttl in ms.
-- Returns 1 if extended, 0 otherwise (gone, someone else's, or not a string).
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
