-- A queued fair lock waiter's attempt on one node: take (or keep) its
-- place in line, and take the lock if it is first in line.
-- KEYS as enter.lua: lock key, queue, leases, ticket counter.
-- ARGV[1] = the waiter's id (the same for all its attempts), ARGV[2] = its
-- ticket, ARGV[3] = this attempt's token, ARGV[4] = ttl in ms, ARGV[5] =
-- the queue lease in ms.
-- The waiter's entry is (re)placed at its ticket — a node that lost it (an
-- empty restart) gets it back at the same place — and its lease renewed;
-- the counter is raised to the ticket, so that a call drawing a ticket
-- later on a quorum that meets this one draws a larger one. The line is
-- ordered by ticket, then id. Returns:
--   {1}      first in line, and the lock key now holds the token (the
--            entry stays until the waiter leaves the line: an attempt
--            that fails after some nodes granted it keeps its place);
--   {0, ms}  another waiter is first: ms until that waiter's lease ends,
--            if it does not renew it;
--   {2, ms}  first in line, but the lock is held: ms until it expires
--            (-1: no expiry; -2: gone meanwhile).
-- Idempotent: sent again after the connection dropped, a grant that had
-- landed finds its own token.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(ARGV[5])
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, id in ipairs(gone) do
  redis.call('ZREM', KEYS[2], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.pcall('GET', KEYS[1]) == ARGV[3] then
  return {1}
end
local counter = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
if counter < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[4], ARGV[2])
end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], now + lease, ARGV[1])
for i = 2, 4 do
  redis.call('PEXPIRE', KEYS[i], 2 * lease)
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if first ~= ARGV[1] then
  local ends = tonumber(redis.call('ZSCORE', KEYS[3], first) or now)
  return {0, math.max(0, ends - now)}
end
if redis.call('SET', KEYS[1], ARGV[3], 'NX', 'PX', ARGV[4]) then
  return {1}
end
return {2, redis.call('PTTL', KEYS[1])}
