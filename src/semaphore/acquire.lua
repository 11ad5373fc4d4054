-- A semaphore's acquire on one node: permit slot ARGV[1] (0-based) of a
-- semaphore of ARGV[4] permits. Each slot is a lock of its own; KEYS[1] is
-- the semaphore's limit key, which holds its permit count for as long as
-- any of its permits is held on this node, and KEYS[2 .. ARGV[4] + 1] are
-- its slot keys (slot i at KEYS[i + 2]). ARGV[2] = token, ARGV[3] = ttl in
-- ms. Returns:
--   {1}            the slot was free and now holds our token (SET NX PX);
--                  the limit key lives at least as long as it;
--   {0, i, j, ...} the slot is taken: the slots this node sees free;
--   {-1, count}    the semaphore is held here with another permit count
--                  (`count`, as the limit key holds it): nothing touched.
-- Idempotent: sent again after the connection dropped, a grant that had
-- landed finds its own token in the slot and is granted again.
local limit = redis.pcall('GET', KEYS[1])
if type(limit) == 'table' and limit.err then
  -- Another type under the limit key: not a semaphore of ours. Any other
  -- error (e.g. NOPERM from an ACL) must surface.
  if not string.find(limit.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply(limit.err)
  end
  return {-1, 'a value that is not a permit count'}
end
if limit and limit ~= ARGV[4] then
  return {-1, limit}
end
local slot = tonumber(ARGV[1]) + 2
if redis.call('SET', KEYS[slot], ARGV[2], 'NX', 'PX', ARGV[3]) then
  -- Absent (the node's first permit of it), the limit key is set without
  -- asking for its ttl first.
  if not limit or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
    redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[3])
  end
  return {1}
end
if redis.pcall('GET', KEYS[slot]) == ARGV[2] then
  return {1}
end
local free = {0}
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    free[#free + 1] = i - 2
  end
end
return free
