-- A fair lock waiter leaves the line on one node (it gave up, was
-- cancelled, or holds the lock after a quorum granted it elsewhere).
-- KEYS[1] = lock key, KEYS[2] = the queue, KEYS[3] = the leases (as
-- enter.lua). ARGV[1] = the waiter's id. ARGV[2], if given, is the turn
-- channel (see release.lua): when the leaving waiter was first in line and
-- the lock is free, the waiter next in line is told its turn came.
-- Returns 1 if the waiter was in line here, 0 otherwise.
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if removed == 1 and first == ARGV[1] and ARGV[2] and redis.call('EXISTS', KEYS[1]) == 0 then
  local next = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if next then
    redis.pcall('PUBLISH', ARGV[2], next)
  end
end
return removed
