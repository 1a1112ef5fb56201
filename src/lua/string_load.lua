-- Loads a session stored as one string key; never writes.
-- KEYS[1]: the session key
-- Returns {value, expiry}, or nil. Redis itself expires the key.
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
return {value, redis.call('EXPIRETIME', KEYS[1])}
