-- Loads a live session; never writes.
-- KEYS[1..3], ARGV[1]: see bucket_common.lua
-- Returns {record, expiry}, or nil if there is no live session.
local expiry = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expiry or tonumber(expiry) <= server_now() then
  return false
end
local record = current_record()
if not record then
  return false
end
return {record, tonumber(expiry)}
