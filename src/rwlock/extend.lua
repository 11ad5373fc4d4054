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
