-- Takes a lock that is free, or renews one this holder already has.
-- KEYS[1]: the lock key
-- ARGV[1]: the holder's token
-- ARGV[2]: lifetime in milliseconds
-- Returns 1 if the lock is ours for the lifetime, 0 if another holds it.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
