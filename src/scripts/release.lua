-- Token-checked release of one lock's keys (one, or several for a
-- multi-resource lock): delete each key only while it holds our token.
-- KEYS = lock keys, ARGV[1] = token. Returns how many keys were deleted.
local released = 0
for _, key in ipairs(KEYS) do
  local value = redis.pcall('GET', key)
  if type(value) == 'table' and value.err then
    -- A key of another type is simply not ours: leave it untouched. Any
    -- other error (e.g. NOPERM from an ACL) must surface, not pass for
    -- "not ours".
    if not string.find(value.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply(value.err)
    end
  elseif value == ARGV[1] then
    released = released + redis.call('DEL', key)
  end
end
return released
