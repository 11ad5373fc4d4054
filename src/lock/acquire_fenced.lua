-- Fenced acquire, phase 1: SET NX PX the lock key and, only when that
-- succeeds, raise the fence counter that lives beside it.
-- KEYS[1] = lock key, KEYS[2] = fence counter key (never expires),
-- KEYS[3] = the counter's mark (a hash: call, value); ARGV[1] = token, ARGV[2] = ttl in ms,
-- ARGV[3] = the id of this acquiring call (every attempt of one call).
-- Returns the counter's value for this grant (>= 1) when granted, 0 when
-- the lock key already exists (whatever its type: NX never touches an
-- existing key).
-- The counter is raised by INCR, unless this call's own earlier attempt
-- raised it here and nothing has written it since: the mark says which
-- call raised it to which value, and a write-back deletes it. Then the
-- value is the one that attempt took, so that a call's retries (attempts
-- that could not reach a quorum) do not raise the counter one more each.
-- That is safe: a grant's fence exceeds every earlier grant's, since their
-- write-backs reached a quorum, which meets this attempt's quorum on some
-- node, where either the write-back came first and this call's raise came
-- after it, or the write-back deleted the mark and this attempt INCRs
-- (see tests/model, runs 2, 14 and control p).
-- Idempotent: sent again after the connection dropped, a grant that had
-- landed finds its own token and returns the counter it was granted.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local counter = redis.call('GET', KEYS[2])
  if counter then
    local mark = redis.call('HMGET', KEYS[3], 'call', 'value')
    if mark[1] == ARGV[3] and mark[2] == counter then
      return tonumber(counter)
    end
  end
  local raised = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[3], 'call', ARGV[3], 'value', raised)
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return raised
end
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return tonumber(redis.call('GET', KEYS[2]))
end
return 0
