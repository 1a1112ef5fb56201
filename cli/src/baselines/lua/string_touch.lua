-- Rolls a string-key session's expiry forward.
-- KEYS[1]: the session key
-- ARGV[1]: seconds from now
-- ARGV[2]: '1' if the value is JSON (its "expires_at" is rewritten too)
-- Returns the new expiry, or nil if there is no live session.
local value = redis.call('GET', KEYS[1])
if not value then
  return false
end
local expiry = expiry_in(ARGV[1])
if ARGV[2] == '1' then
  redis.call('SET', KEYS[1], with_expiry(value, expiry), 'EXAT', expiry)
else
  redis.call('EXPIREAT', KEYS[1], expiry)
end
return expiry
