-- Removes a session from its bucket.
-- KEYS[1..3], ARGV[1]: see bucket_common.lua
-- ARGV[2]: '1' to remove only if the stored record equals ARGV[3] and the
-- expiry equals ARGV[4]
-- ARGV[3]: the expected record
-- ARGV[4]: the expected expiry
-- Returns 1 if removed, 0 if there was no live session, -1 on a mismatch.
local expiry = live_expiry(server_now())
if not expiry then
  return 0
end
local record, out_of_line = current_record()
if ARGV[2] == '1' and (record ~= ARGV[3] or expiry ~= tonumber(ARGV[4])) then
  return -1
end
if out_of_line then
  redis.call('DEL', KEYS[3])
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
