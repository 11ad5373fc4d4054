-- Token-checked extend: reset the lock key's time-to-live only while it
-- holds our token. KEYS[1] = lock key, ARGV[1] = token, ARGV[2] = ttl in ms.
-- Returns 1 if extended, 0 otherwise (gone, someone else's, or not a string).
local value = redis.pcall('GET', KEYS[1])
if type(value) == 'table' and value.err then
  -- A key of another type is simply not ours: leave it untouched. Any other
  -- error (e.g. NOPERM from an ACL) must surface, not pass for "not ours".
  if string.find(value.err, 'WRONGTYPE', 1, true) then
    return 0
  end
  return redis.error_reply(value.err)
end
if value == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
