-- Token-checked release of one lock's keys (one, or several for a
-- multi-resource lock): delete each key only while it holds our token.
-- KEYS = lock keys, ARGV[1] = token. ARGV[2], if given, is an id of this
-- release, published on the channel ARGV[2 + i] when KEYS[i] is deleted,
-- for waiters that subscribe instead of polling. Returns how many keys
-- were deleted.
local released = 0
for i, key in ipairs(KEYS) do
  local value = redis.pcall('GET', key)
  if type(value) == 'table' and value.err then
    -- A key of another type is simply not ours: leave it untouched. Any
    -- other error (e.g. NOPERM from an ACL) must surface, not pass for
    -- "not ours".
    if not string.find(value.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply(value.err)
    end
  elseif value == ARGV[1] then
    local deleted = redis.call('DEL', key)
    released = released + deleted
    if deleted == 1 and ARGV[2 + i] then
      -- Best effort: the key is gone either way (e.g. an ACL without
      -- PUBLISH must not turn a release into an error).
      redis.pcall('PUBLISH', ARGV[2 + i], ARGV[2])
    end
  end
end
return released
