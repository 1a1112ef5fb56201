-- Rolls a live session's expiry forward.
-- KEYS[1..3], ARGV[1]: see bucket_common.lua
-- ARGV[2]: seconds from now
-- Returns the new expiry, or nil if there is no live session.
local now, from = server_clock()
if not live_expiry(now) then
  return false
end
local expiry = from + tonumber(ARGV[2])
-- An out-of-line record moves with it; for an inline one this finds no key,
-- a cheaper test than looking for the marker in the HASH.
redis.call('EXPIREAT', KEYS[3], expiry)
redis.call('ZADD', KEYS[2], 'XX', expiry, ARGV[1])
return expiry
