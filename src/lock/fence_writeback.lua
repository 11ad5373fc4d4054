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
