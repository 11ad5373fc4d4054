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
