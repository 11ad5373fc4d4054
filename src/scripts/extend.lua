-- Token-checked extend of one or many locks in one call (auto-extension
-- batches every due lock of a node into a single call).
-- KEYS[i] = lock key, ARGV[2i-1] = its token, ARGV[2i] = its ttl in ms.
-- Returns an array: 1 where the key held its token and got the new ttl, 0
-- where it is gone, someone else's, or not a string.
local out = {}
for i, key in ipairs(KEYS) do
  local value = redis.pcall('GET', key)
  if type(value) == 'table' and value.err then
    -- A key of another type is simply not ours: leave it untouched. Any
    -- other error (e.g. NOPERM from an ACL) must surface, not pass for
    -- "not ours".
    if not string.find(value.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply(value.err)
    end
    out[i] = 0
  elseif value == ARGV[2 * i - 1] then
    out[i] = redis.call('PEXPIRE', key, ARGV[2 * i])
  else
    out[i] = 0
  end
end
return out
