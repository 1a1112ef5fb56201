-- Extends a lock only if it still holds our token.
-- KEYS[1]: the lock key
-- ARGV[1]: our token
-- ARGV[2]: new lifetime in milliseconds
-- Returns 1 if extended, 0 if the lock had expired or passed to another.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
