-- Releases a lock only if it still holds our token (compare-and-delete).
-- KEYS[1]: the lock key
-- ARGV[1]: our token
-- Returns 1 if released, 0 if the lock had expired or passed to another.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
