-- Inserts a new session into its bucket.
-- KEYS[1..3], ARGV[1]: see bucket_common.lua
-- ARGV[2]: record bytes
-- ARGV[3]: '1' to keep the record in the bucket, '0' to store it out of line
-- ARGV[4]: 'in' (ARGV[5] is seconds from now) or 'at' (ARGV[5] is unix seconds)
-- ARGV[5]: seconds
-- Returns the expiry; 0 if the field is taken; -1 if an 'at' expiry has passed.
local now = server_now()
local expiry = tonumber(ARGV[5])
if ARGV[4] == 'in' then
  expiry = expiry_in(expiry)
end
if expiry <= now then
  return -1
end
if live_expiry(now) or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 0
end
write_record(ARGV[2], ARGV[3], expiry, false)
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
return expiry
