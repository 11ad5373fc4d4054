-- Token-checked release: delete the lock key only while it holds our token.
-- KEYS[1] = lock key, ARGV[1] = token. Returns 1 if deleted, 0 otherwise.
-- redis.pcall: a key of another type (WRONGTYPE) is simply not ours; it is
-- left untouched instead of raising.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
