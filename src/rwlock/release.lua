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
