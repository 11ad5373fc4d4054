-- Election: the leader's proclaimed value, kept beside its lock key and
-- written only while the lock key holds the leader's token.
-- KEYS[1] = lock key, KEYS[2] = leader key (a hash: token, term, rev,
-- value; a hash of another token is stale);
-- ARGV[1] = token, ARGV[2] = term, ARGV[3] = revision, ARGV[4] = value,
-- ARGV[5] = in ms, how long the hash outlives this write: each
-- proclamation (the leader repeats it every third of the ttl while it
-- leads) sets the hash to expire that long after, so that it does not
-- outlive its leader for long (two ttls and a node timeout);
-- ARGV[6], if given, is a channel on which a write is announced, for
-- observers that subscribe instead of polling.
-- Returns 1 when the hash now holds this revision of the token's value (or
-- a newer one, which is kept), 0 when the lock key holds anything else or
-- nothing: that node does not count this candidate as leader.
-- Idempotent: the same revision sent again changes nothing.
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' and holder.err then
  -- A key of another type is simply not ours. Any other error (e.g.
  -- NOPERM from an ACL) must surface, not pass for "not ours".
  if not string.find(holder.err, 'WRONGTYPE', 1, true) then
    return redis.error_reply(holder.err)
  end
  return 0
end
if holder ~= ARGV[1] then
  return 0
end
local current = redis.call('HMGET', KEYS[2], 'token', 'rev')
if current[1] == ARGV[1] and tonumber(current[2] or '') ~= nil
    and tonumber(current[2]) >= tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
  return 1
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'token', ARGV[1], 'term', ARGV[2], 'rev', ARGV[3],
  'value', ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
if ARGV[6] then
  -- Best effort: the value is stored either way.
  redis.pcall('PUBLISH', ARGV[6], ARGV[2])
end
return 1
