-- A fair lock's first attempt of a call, on one node: with nobody queued,
-- take the lock as a plain lock would (SET NX PX); either way, draw a
-- ticket. A call that waits gives its waiter id: refused here, it is
-- placed in line at once, at the ticket it drew — behind everyone in line
-- here, since the counter is never below a ticket in line — so that a
-- call whose first attempt lands after this one's finds the line taken,
-- however long this caller takes to read its answers and place itself on
-- every node at its final ticket (the largest of a quorum's).
-- KEYS[1] = lock key, KEYS[2] = the queue (a sorted set: each waiter's id
-- scored with its ticket), KEYS[3] = the waiters' leases (a sorted set:
-- each waiter's id scored with its lease's end, in ms by this server's
-- clock), KEYS[4] = the ticket counter.
-- ARGV[1] = token, ARGV[2] = ttl in ms, ARGV[3] = the queue lease in ms,
-- ARGV[4] (if given) = the waiter's id.
-- Returns {granted, ticket}: granted 1 if the lock key now holds the
-- token (0 otherwise: then, with an id, the waiter is in line here),
-- ticket the counter's new value. Waiters whose lease ended are removed
-- first (they died or gave up without leaving).
-- Idempotent for the lock: sent again after the connection dropped, a
-- grant that had landed finds its own token (and draws another ticket,
-- which only places the call later).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, id in ipairs(gone) do
  redis.call('ZREM', KEYS[2], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local granted = 0
if redis.call('ZCARD', KEYS[2]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    granted = 1
  elseif redis.pcall('GET', KEYS[1]) == ARGV[1] then
    granted = 1
  end
end
local ticket = redis.call('INCR', KEYS[4])
local lease = tonumber(ARGV[3])
if granted == 0 and ARGV[4] then
  redis.call('ZADD', KEYS[2], ticket, ARGV[4])
  redis.call('ZADD', KEYS[3], now + lease, ARGV[4])
  redis.call('PEXPIRE', KEYS[2], 2 * lease)
  redis.call('PEXPIRE', KEYS[3], 2 * lease)
end
-- The counter outlives every lease taken with it; idle, it goes.
redis.call('PEXPIRE', KEYS[4], 2 * lease)
return {granted, ticket}
