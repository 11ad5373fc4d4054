#!lua name=quorumlock
-- quorumlock's Lua scripts as one Redis Functions library, for
-- ScriptMode::Functions. Load it once per node (every master of a cluster),
-- and again after upgrading quorumlock:
--   redis-cli -x FUNCTION LOAD REPLACE < functions.lua
-- GENERATED from the other .lua files of this directory, each wrapped
-- verbatim as function(KEYS, ARGV) ... end: do not edit by hand. After
-- changing a script, regenerate with
--   QUORUMLOCK_BLESS=1 cargo test --lib scripts

redis.register_function('quorumlock_release', function(KEYS, ARGV)
  -- Token-checked release of one lock's keys (one, or several for a
  -- multi-resource lock): delete each key only while it holds our token.
  -- KEYS = lock keys, ARGV[1] = token. ARGV[2], if given, is an id of this
  -- release, published on the channel ARGV[2 + i] when KEYS[i] is deleted,
  -- for waiters that subscribe instead of polling. Returns how many keys
  -- were deleted.
  local released = 0
  for i, key in ipairs(KEYS) do
    local value = redis.pcall('GET', key)
    if type(value) == 'table' and value.err then
      -- A key of another type is simply not ours: leave it untouched. Any
      -- other error (e.g. NOPERM from an ACL) must surface, not pass for
      -- "not ours".
      if not string.find(value.err, 'WRONGTYPE', 1, true) then
        return redis.error_reply(value.err)
      end
    elseif value == ARGV[1] then
      local deleted = redis.call('DEL', key)
      released = released + deleted
      if deleted == 1 and ARGV[2 + i] then
        -- Best effort: the key is gone either way (e.g. an ACL without
        -- PUBLISH must not turn a release into an error).
        redis.pcall('PUBLISH', ARGV[2 + i], ARGV[2])
      end
    end
  end
  return released
end)

redis.register_function('quorumlock_extend', function(KEYS, ARGV)
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
end)

redis.register_function('quorumlock_acquire_many', function(KEYS, ARGV)
  -- Multi-resource acquire: every key or none, atomically on this node.
  -- KEYS = the lock keys; ARGV[1] = token, ARGV[2] = ttl in ms.
  -- Returns 1 when all keys were set, 0 when any of them exists (whatever its
  -- type), in which case nothing was written.
  for _, key in ipairs(KEYS) do
    if redis.call('EXISTS', key) == 1 then
      return 0
    end
  end
  for _, key in ipairs(KEYS) do
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
  end
  return 1
end)

redis.register_function('quorumlock_acquire_fenced', function(KEYS, ARGV)
  -- Fenced acquire, phase 1: SET NX PX the lock key and, only when that
  -- succeeds, increment the fence counter that lives beside it.
  -- KEYS[1] = lock key, KEYS[2] = fence counter key (never expires);
  -- ARGV[1] = token, ARGV[2] = ttl in ms.
  -- Returns the counter's new value (>= 1) when granted, 0 when the lock key
  -- already exists (whatever its type: NX never touches an existing key).
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return redis.call('INCR', KEYS[2])
  end
  return 0
end)

redis.register_function('quorumlock_fence_writeback', function(KEYS, ARGV)
  -- Fenced acquire, phase 2: raise the fence counter to at least the fence a
  -- quorum granted, so that every later quorum (which intersects this one)
  -- reads a counter >= it and hands out a larger fence. Never lowers it.
  -- KEYS[1] = fence counter key; ARGV[1] = the granted fence. Returns 1.
  local current = tonumber(redis.call('GET', KEYS[1]) or '0')
  if current < tonumber(ARGV[1]) then
    redis.call('SET', KEYS[1], ARGV[1])
  end
  return 1
end)
