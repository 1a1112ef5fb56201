-- Replaces a live session's record, keeping its expiry.
-- KEYS[1..3], ARGV[1]: see bucket_common.lua
-- ARGV[2]: new record bytes
-- ARGV[3]: '1' to keep the record in the bucket, '0' to store it out of line
-- ARGV[4]: '1' to write only if the stored record equals ARGV[5]
-- ARGV[5]: the expected record
-- Returns 1 if written, 0 if there is no live session, -1 on a mismatch.
local expiry = live_expiry(server_now())
if not expiry then
  return 0
end
local record, out_of_line = current_record()
if ARGV[4] == '1' and record ~= ARGV[5] then
  return -1
end
write_record(ARGV[2], ARGV[3], expiry, out_of_line)
return 1
