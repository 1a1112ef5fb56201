-- Takes a named lock with a fencing token: the lock key is set only if it
-- is free, and then the lock's counter grows by one and is returned, so
-- every acquisition of the lock gets a larger number than the last.
-- KEYS[1]: the lock key; KEYS[2]: its fencing counter (same hash tag)
-- ARGV[1]: the holder's token; ARGV[2]: lifetime in milliseconds
-- Returns the fencing token, or 0 if another holds the lock.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
