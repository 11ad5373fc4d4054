-- Token-checked extend of one or many locks in one call (auto-extension
-- batches every due lock of a node into a single call). An extension is a
-- Redlock round with the holder's own token, so where a lock's key is gone
-- (it expired early, the node restarted empty, the key was evicted) it is
-- set again, as an acquire would set it.
-- Per lock, ARGV holds four values: its token, its ttl in ms, its number of
-- keys n, and its fence (0 when not fenced); KEYS holds its n keys, then its
-- fence counter's key when it is fenced.
-- Returns one status per lock, decided for all of its keys at once:
--   0 some key holds another value (another owner's token, or not a
--     string): nothing of that lock is touched;
--   1 every key held our token and got the new ttl;
--   2 the keys that held our token got the new ttl and the absent ones were
--     set again (our token, the new ttl); a fenced lock's counter is raised
--     to at least its fence, as the acquire's write-back did, so that a
--     node that came back empty still hands later grants larger fences.
local out = {}
local k = 0
for a = 1, #ARGV, 4 do
  local token, ttl = ARGV[a], ARGV[a + 1]
  local n, fence = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local status = 1
  for j = k + 1, k + n do
    local value = redis.pcall('GET', KEYS[j])
    if type(value) == 'table' and value.err then
      -- A key of another type is simply not ours: leave it untouched. Any
      -- other error (e.g. NOPERM from an ACL) must surface, not pass for
      -- "not ours".
      if not string.find(value.err, 'WRONGTYPE', 1, true) then
        return redis.error_reply(value.err)
      end
      status = 0
      break
    elseif not value then
      status = 2
    elseif value ~= token then
      status = 0
      break
    end
  end
  local counter = KEYS[k + n + 1]
  if status == 2 and fence > 0 then
    -- Checked before anything is written: a counter that is not a number
    -- (or not a string) cannot be raised, so the lock is not restored.
    local current = redis.pcall('GET', counter)
    if type(current) == 'table' and current.err then
      if not string.find(current.err, 'WRONGTYPE', 1, true) then
        return redis.error_reply(current.err)
      end
      status = 0
    else
      current = tonumber(current or '0')
      if current == nil then
        status = 0
      elseif current < fence then
        redis.call('SET', counter, ARGV[a + 3])
      end
    end
  end
  if status ~= 0 then
    for j = k + 1, k + n do
      if redis.call('PEXPIRE', KEYS[j], ttl) == 0 then
        redis.call('SET', KEYS[j], token, 'PX', ttl)
      end
    end
  end
  out[#out + 1] = status
  k = k + n
  if fence > 0 then
    k = k + 1
  end
end
return out
