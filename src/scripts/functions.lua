#!lua name=quorumlock
-- quorumlock's Lua scripts as one Redis Functions library, for
-- ScriptMode::Functions. Load it once per node (every master of a cluster),
-- and again after upgrading quorumlock:
--   redis-cli -x FUNCTION LOAD REPLACE < functions.lua
-- GENERATED from the other .lua files of this directory, each wrapped
-- verbatim as function(KEYS, ARGV) ... end: do not edit by hand. After
-- changing a script, regenerate with
--   QUORUMLOCK_BLESS=1 cargo test --lib scripts

redis.register_function('quorumlock_batch', function(KEYS, ARGV)
  -- Many plain (one-key, unfenced) lock requests bound for one node in one
  -- call: the requests that queued up while the node's previous call was in
  -- flight (group commit). Entries are independent and run in order, so the
  -- same key twice behaves exactly as two separate calls in that order.
  -- KEYS[i] is entry i's key; ARGV holds four values per entry: its op, its
  -- token, then
  --   'a' acquire: ttl in ms, '' — SET NX PX; 1 granted, 0 the key exists
  --       (whatever its type). Idempotent for its own token: a call sent
  --       again after its connection dropped finds its own grant.
  --   'r' release: release id or '', channel or '' — token-checked DEL,
  --       announced on the channel when given; 1 deleted, 0 not ours.
  --   'e' extend: ttl in ms, '' — as extend.lua for one key: 1 extended,
  --       2 restored (the key was gone), 0 another value holds it.
  -- Returns one status per entry; an entry whose command failed (e.g. NOPERM
  -- on its key) gets that error in its place, and the others still run.
  local out = {}

  -- The error of a failed command, or nil. A key of another type is simply
  -- not ours (nil too, with `wrongtype` set).
  local function failure(reply)
    if type(reply) == 'table' and reply.err then
      if string.find(reply.err, 'WRONGTYPE', 1, true) then
        return nil, true
      end
      return reply
    end
    return nil, false
  end

  for i, key in ipairs(KEYS) do
    local a = (i - 1) * 4 + 1
    local op, token, arg, channel = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
    local status
    if op == 'a' then
      local set = redis.pcall('SET', key, token, 'NX', 'PX', arg)
      local err = failure(set)
      if err then
        status = err
      elseif set then
        status = 1
      else
        local value = redis.pcall('GET', key)
        if value == token then
          status = 1
        else
          status = 0
        end
      end
    else
      local value = redis.pcall('GET', key)
      local err, wrongtype = failure(value)
      if err then
        status = err
      elseif wrongtype then
        status = 0
      elseif op == 'r' then
        status = 0
        if value == token then
          status = redis.pcall('DEL', key)
          err = failure(status)
          if err then
            status = err
          elseif status == 1 and channel ~= '' then
            -- Best effort, as in release.lua.
            redis.pcall('PUBLISH', channel, arg)
          end
        end
      elseif not value then
        status = redis.pcall('SET', key, token, 'PX', arg)
        status = failure(status) or 2
      elseif value == token then
        status = redis.pcall('PEXPIRE', key, arg)
        status = failure(status) or 1
      else
        status = 0
      end
    end
    out[i] = status
  end
  return out
end)

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
end)

redis.register_function('quorumlock_acquire_many', function(KEYS, ARGV)
  -- Multi-resource acquire: every key or none, atomically on this node.
  -- KEYS = the lock keys; ARGV[1] = token, ARGV[2] = ttl in ms.
  -- Returns 1 when all keys were set, 0 when any of them holds another value
  -- (whatever its type), in which case nothing was written. Keys that
  -- already hold the token count as free: sent again after the connection
  -- dropped, a grant that had landed is granted again.
  for _, key in ipairs(KEYS) do
    local value = redis.pcall('GET', key)
    if value and value ~= ARGV[1] then
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
end)

redis.register_function('quorumlock_fence_writeback', function(KEYS, ARGV)
  -- Fenced acquire, phase 2: raise the fence counter to at least the fence a
  -- quorum granted, so that every later quorum (which intersects this one)
  -- reads a counter >= it and hands out a larger fence. Never lowers it.
  -- Deletes the counter's mark (see acquire_fenced.lua) whether or not it
  -- raised the counter: no call's retry may reuse a value from before it.
  -- KEYS[1] = fence counter key, KEYS[2] = its mark; ARGV[1] = the granted
  -- fence. Returns 1.
  local current = tonumber(redis.call('GET', KEYS[1]) or '0')
  if current < tonumber(ARGV[1]) then
    redis.call('SET', KEYS[1], ARGV[1])
  end
  redis.call('DEL', KEYS[2])
  return 1
end)

redis.register_function('quorumlock_elect_proclaim', function(KEYS, ARGV)
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
end)

redis.register_function('quorumlock_elect_leader', function(KEYS, ARGV)
  -- Election: who holds the lock key on this node, and what it proclaimed,
  -- read in one atomic step.
  -- KEYS[1] = lock key, KEYS[2] = leader key (see elect_proclaim.lua).
  -- Returns {} when the lock key is absent (or not a string); {token} when
  -- the leader key holds nothing of that token (not written yet, or the node
  -- restarted empty and a renewal restored the lock); otherwise
  -- {token, term, rev, value}.
  local holder = redis.pcall('GET', KEYS[1])
  if type(holder) == 'table' and holder.err then
    if not string.find(holder.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply(holder.err)
    end
    return {}
  end
  if not holder then
    return {}
  end
  local record = redis.pcall('HMGET', KEYS[2], 'token', 'term', 'rev', 'value')
  if type(record) == 'table' and record.err then
    if not string.find(record.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply(record.err)
    end
    return {holder}
  end
  if record[1] ~= holder or not record[2] or not record[3] or not record[4] then
    return {holder}
  end
  return {holder, record[2], record[3], record[4]}
end)

redis.register_function('quorumlock_semaphore_acquire', function(KEYS, ARGV)
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
end)

redis.register_function('quorumlock_semaphore_extend', function(KEYS, ARGV)
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
end)

redis.register_function('quorumlock_semaphore_release', function(KEYS, ARGV)
  -- Token-checked release of one semaphore permit: delete its slot key only
  -- while it holds our token, and the semaphore's limit key once no permit
  -- of it is held on this node any more (only while it holds our permit
  -- count: a limit key of another count belongs to other holders).
  -- KEYS[1] = the slot key, KEYS[2] = the limit key, KEYS[3 ..] = every slot
  -- key of the semaphore. ARGV[1] = token, ARGV[2] = the permit count.
  -- ARGV[3], if given, is an id of this release, published on the channel
  -- ARGV[4] when the slot key is deleted, for waiters that subscribe instead
  -- of polling. Returns 1 if our permit was deleted, else 0.
  local released = 0
  local value = redis.pcall('GET', KEYS[1])
  if type(value) == 'table' and value.err then
    -- A key of another type is simply not ours; any other error surfaces.
    if not string.find(value.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply(value.err)
    end
  elseif value == ARGV[1] then
    released = redis.call('DEL', KEYS[1])
    if released == 1 and ARGV[3] then
      -- Best effort, as the lock's release.
      redis.pcall('PUBLISH', ARGV[4], ARGV[3])
    end
  end
  -- Whether any slot is still held, asked of up to 64 slots per EXISTS (one
  -- command where a call of its own per slot cost the node more than the
  -- rest of the release).
  for first = 3, #KEYS, 64 do
    if redis.call('EXISTS', unpack(KEYS, first, math.min(first + 63, #KEYS))) > 0 then
      return released
    end
  end
  local limit = redis.pcall('GET', KEYS[2])
  if limit == ARGV[2] then
    redis.call('DEL', KEYS[2])
  end
  return released
end)

redis.register_function('quorumlock_rw_acquire', function(KEYS, ARGV)
  -- A reader-writer lock's acquire on one node. KEYS[1] = the writer key (the
  -- writer's token), KEYS[2] = the readers (a sorted set: each reader's token
  -- scored with its expiry in ms by this server's clock), KEYS[3] = the
  -- waiting writer's mark. ARGV[1] = 'r' (read) or 'w' (write), ARGV[2] =
  -- token, ARGV[3] = ttl in ms, ARGV[4] = the id of the waiting writer (its
  -- call, across attempts), ARGV[5] = how long its mark lives, in ms.
  -- Expired readers are removed first (by TIME). A reader is admitted where
  -- no writer holds and no writer waits; a writer where no writer holds and
  -- no reader is live. A writer refused only because of readers marks that
  -- it waits, and new readers are refused while the mark lives (writer
  -- preference); the mark goes when that writer is admitted, or expires.
  -- Returns 1 if admitted, 0 if not. Idempotent: sent again after the
  -- connection dropped, a hold that had landed finds its own token and is
  -- admitted again.
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local ttl = tonumber(ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if ARGV[1] == 'r' and redis.call('ZSCORE', KEYS[2], ARGV[2]) then
    return 1
  end
  if ARGV[1] == 'w' and redis.call('GET', KEYS[1]) == ARGV[2] then
    return 1
  end
  if ARGV[1] == 'r' then
    -- A writer, or one waiting: one EXISTS asks for both.
    if redis.call('EXISTS', KEYS[1], KEYS[3]) > 0 then
      return 0
    end
    redis.call('ZADD', KEYS[2], now + ttl, ARGV[2])
    if redis.call('PTTL', KEYS[2]) < ttl then
      redis.call('PEXPIRE', KEYS[2], ttl)
    end
    return 1
  end
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
  end
  local waiting = redis.call('GET', KEYS[3])
  if redis.call('ZCARD', KEYS[2]) > 0 then
    if not waiting or waiting == ARGV[4] then
      redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[5])
    end
    return 0
  end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
  if waiting == ARGV[4] then
    redis.call('DEL', KEYS[3])
  end
  return 1
end)

redis.register_function('quorumlock_rw_extend', function(KEYS, ARGV)
  -- Token-checked extend of one or many reader-writer holds in one call (the
  -- counterpart of extend.lua; auto-extension batches every due hold of a
  -- node). Per hold, ARGV holds its mode ('r' or 'w'), its token and its ttl
  -- in ms; KEYS holds its writer key, then its readers key. Where a hold is
  -- gone (it expired early, the node restarted empty) it is set again only
  -- where its acquire would be admitted now: a reader where no writer holds,
  -- a writer where no other writer holds and no reader is live.
  -- Returns one status per hold: 0 not ours and not restorable (nothing
  -- touched), 1 held and extended, 2 restored.
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local out = {}
  local k = 0
  for a = 1, #ARGV, 3 do
    local mode, token, ttl = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
    local writer_key, readers_key = KEYS[k + 1], KEYS[k + 2]
    k = k + 2
    local status = 0
    redis.call('ZREMRANGEBYSCORE', readers_key, '-inf', now)
    local writer = redis.call('GET', writer_key)
    if mode == 'r' then
      if not writer then
        if redis.call('ZSCORE', readers_key, token) then
          status = 1
        else
          status = 2
        end
        redis.call('ZADD', readers_key, now + ttl, token)
        if redis.call('PTTL', readers_key) < ttl then
          redis.call('PEXPIRE', readers_key, ttl)
        end
      end
    elseif writer == token then
      status = 1
      redis.call('PEXPIRE', writer_key, ttl)
    elseif not writer and redis.call('ZCARD', readers_key) == 0 then
      status = 2
      redis.call('SET', writer_key, token, 'PX', ttl)
    end
    out[#out + 1] = status
  end
  return out
end)

redis.register_function('quorumlock_rw_release', function(KEYS, ARGV)
  -- Token-checked release of a reader-writer hold on one node. KEYS[1] = the
  -- writer key, KEYS[2] = the readers key, KEYS[3] = the waiting writer's
  -- mark. ARGV[1] = 'r' or 'w', ARGV[2] = token, ARGV[3] = the writer's call
  -- id (its mark goes too, where it is ours: a writer that got in may have
  -- left it on a node that never answered its grant). ARGV[4], if given, is
  -- an id of this release, published on the channel ARGV[5] when the hold is
  -- removed, for waiters that subscribe instead of polling. Returns 1 if our
  -- hold was removed, else 0.
  local released = 0
  if ARGV[1] == 'r' then
    released = redis.call('ZREM', KEYS[2], ARGV[2])
    if redis.call('ZCARD', KEYS[2]) == 0 then
      redis.call('DEL', KEYS[2])
    end
  else
    if redis.call('GET', KEYS[1]) == ARGV[2] then
      released = redis.call('DEL', KEYS[1])
    end
    if redis.call('GET', KEYS[3]) == ARGV[3] then
      redis.call('DEL', KEYS[3])
    end
  end
  if released == 1 and ARGV[4] then
    -- Best effort, as the lock's release.
    redis.pcall('PUBLISH', ARGV[5], ARGV[4])
  end
  return released
end)

redis.register_function('quorumlock_fair_enter', function(KEYS, ARGV)
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
end)

redis.register_function('quorumlock_fair_try', function(KEYS, ARGV)
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
end)

redis.register_function('quorumlock_fair_release', function(KEYS, ARGV)
  -- Token-checked release of a fair lock on one node, handing the turn on.
  -- KEYS[1] = lock key, KEYS[2] = the queue, KEYS[3] = the leases (as
  -- enter.lua). ARGV[1] = token. ARGV[2], if given, is the channel on which
  -- the waiter now first in line is told its turn came: the message is its
  -- id, and only that waiter tries (one per node that released; the same
  -- waiter on every node, since the line has one order).
  -- Returns 1 if the key held the token and was deleted, 0 otherwise.
  local value = redis.pcall('GET', KEYS[1])
  if type(value) == 'table' and value.err then
    if not string.find(value.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply(value.err)
    end
    return 0
  end
  if value ~= ARGV[1] then
    return 0
  end
  redis.call('DEL', KEYS[1])
  if ARGV[2] then
    local time = redis.call('TIME')
    local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    local ends = first and tonumber(redis.call('ZSCORE', KEYS[3], first))
    if ends and ends > now then
      -- Best effort: the key is gone either way.
      redis.pcall('PUBLISH', ARGV[2], first)
    end
  end
  return 1
end)

redis.register_function('quorumlock_fair_leave', function(KEYS, ARGV)
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
end)
