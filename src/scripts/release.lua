-- Token-checked release: delete the lock key only while it holds our token.
-- KEYS[1] = lock key, ARGV[1] = token. Returns 1 if deleted, 0 otherwise.
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
  return redis.call('DEL', KEYS[1])
end
return 0
