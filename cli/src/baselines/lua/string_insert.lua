-- Inserts a session stored as one string key (packed-setex, json-setex).
-- KEYS[1]: the session key
-- ARGV[1]: the value; for JSON, with "expires_at":0 to be filled in
-- ARGV[2]: '1' if the value is JSON
-- ARGV[3]: 'in' or 'at'; ARGV[4]: seconds (see requested_expiry)
-- Returns the expiry; 0 if the key exists; -1 if an 'at' expiry has passed.
local expiry = requested_expiry(ARGV[3], ARGV[4])
if not expiry then
  return -1
end
local value = ARGV[1]
if ARGV[2] == '1' then
  value = with_expiry(value, expiry)
end
if not redis.call('SET', KEYS[1], value, 'NX', 'EXAT', expiry) then
  return 0
end
return expiry
