-- Token-checked extend of one or many semaphore permits in one call (the
-- permit counterpart of extend.lua; auto-extension batches every due
-- permit of a node). Per permit, ARGV holds its token, its ttl in ms and
-- its semaphore's permit count; KEYS holds its slot key, then its
-- semaphore's limit key. A permit is a lock on its slot, so where the slot
-- key is gone (it expired early, the node restarted empty) it is set
-- again, as the acquire would set it: only while the limit key is absent
-- or holds the same count. Where the permit holds, the limit key is made
-- to live at least as long as it.
-- Returns one status per permit:
--   0 the slot holds another value, or the semaphore is held here with
--     another permit count: nothing of that permit is touched;
--   1 the slot held our token and got the new ttl;
--   2 the slot was absent and was set again (our token, the new ttl).
local out = {}
local k = 0
for a = 1, #ARGV, 3 do
  local token, ttl, count = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local slot, limit_key = KEYS[k + 1], KEYS[k + 2]
  k = k + 2
  local status = 0
  local value = redis.pcall('GET', slot)
  local limit = redis.pcall('GET', limit_key)
  local wrongtype = false
  for _, reply in ipairs({value, limit}) do
    if type(reply) == 'table' and reply.err then
      if not string.find(reply.err, 'WRONGTYPE', 1, true) then
        return redis.error_reply(reply.err)
      end
      wrongtype = true
    end
  end
  if wrongtype or (limit and limit ~= count) then
    status = 0
  elseif value == token then
    status = 1
    redis.call('PEXPIRE', slot, ttl)
  elseif not value then
    status = 2
    redis.call('SET', slot, token, 'PX', ttl)
  end
  if status ~= 0 and redis.call('PTTL', limit_key) < tonumber(ttl) then
    redis.call('SET', limit_key, count, 'PX', ttl)
  end
  out[#out + 1] = status
end
return out
