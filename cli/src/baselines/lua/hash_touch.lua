-- Rolls a hash-per-session session's expiry forward.
-- KEYS[1]: the session key
-- ARGV[1]: seconds from now
-- Returns the new expiry, or nil if there is no live session.
if redis.call('HEXISTS', KEYS[1], 'i') == 0 then
  return false
end
local expiry = expiry_in(ARGV[1])
redis.call('HSET', KEYS[1], 'e', expiry)
redis.call('EXPIREAT', KEYS[1], expiry)
return expiry
