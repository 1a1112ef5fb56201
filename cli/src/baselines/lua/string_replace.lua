-- Replaces a string-key session's value, keeping its expiry.
-- KEYS[1]: the session key
-- ARGV[1]: the new value; for JSON, with "expires_at":0
-- ARGV[2]: '1' if the value is JSON
-- ARGV[3]: '1' to write only if the stored value equals ARGV[4]
-- ARGV[4]: the expected value; for JSON, with "expires_at":0
-- Returns 1 if written, 0 if there is no live session, -1 on a mismatch.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
local expiry = redis.call('EXPIRETIME', KEYS[1])
if ARGV[3] == '1' then
  if ARGV[2] == '1' then
    current = with_expiry(current, 0)
  end
  if current ~= ARGV[4] then
    return -1
  end
end
local value = ARGV[1]
if ARGV[2] == '1' then
  value = with_expiry(value, expiry)
end
redis.call('SET', KEYS[1], value, 'EXAT', expiry)
return 1
