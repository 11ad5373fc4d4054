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
