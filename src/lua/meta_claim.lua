-- Records what a store is, the first time it is opened, and returns what
-- is recorded, so every later process can check it opened the same store.
-- KEYS[1]: the namespace's metadata HASH
-- ARGV: field, value, field, value, ...
-- Returns the HASH's fields and values, as HGETALL.
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
end
return redis.call('HGETALL', KEYS[1])
