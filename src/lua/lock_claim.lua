-- Takes a lock that is free, or renews one this holder already has.
-- KEYS[1]: the lock key
-- ARGV[1]: the holder's token
-- ARGV[2]: lifetime in milliseconds
-- Returns 1 if the lock is ours for the lifetime, 0 if another holds it.
-- A lock is always written with a lifetime; a string there without one (a
-- PERSIST, a hand-written key) would hold the lock for ever, so it is taken
-- over. A key of another type is an error, and is left alone.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] or redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
