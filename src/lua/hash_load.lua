-- Loads a hash-per-session session; never writes.
-- KEYS[1]: the session key
-- Returns {identity, attributes or '', expiry}, or nil.
local fields = redis.call('HMGET', KEYS[1], 'i', 'a', 'e')
if not fields[1] then
  return false
end
return {fields[1], fields[2] or '', tonumber(fields[3])}
