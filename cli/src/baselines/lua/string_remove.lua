-- Removes a string-key session.
-- KEYS[1]: the session key
-- ARGV[1]: '1' if the value is JSON
-- ARGV[2]: '1' to remove only if the stored value equals ARGV[3] and the
-- key's expiry equals ARGV[4]
-- ARGV[3]: the expected value; for JSON, with "expires_at":0
-- ARGV[4]: the expected expiry in unix seconds
-- Returns 1 if removed, 0 if there was no live session, -1 on a mismatch.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if ARGV[2] == '1' then
  if ARGV[1] == '1' then
    current = with_expiry(current, 0)
  end
  if current ~= ARGV[3] or redis.call('EXPIRETIME', KEYS[1]) ~= tonumber(ARGV[4]) then
    return -1
  end
end
redis.call('DEL', KEYS[1])
return 1
