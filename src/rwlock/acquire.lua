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
