-- Rolls a live session's expiry forward, in its value. The index entry,
-- a lower bound of the bucket's earliest expiry, stays one.
-- KEYS[1..], ARGV[1..2]: see compact_common.lua
-- ARGV[3]: seconds from now; ARGV[4], where given: the expiry itself,
-- unix seconds, instead
-- Returns the new expiry, or nil if there is no live session.
local now, from = server_clock()
local value = live_value(now)
if not value then
  return false
end
local expiry = tonumber(ARGV[4]) or from + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], with_expiry(value, expiry))
expire_field(KEYS[1], ARGV[1], expiry)
local pieces, _, short = pieces_in(value)
expire_pieces(KEYS[1], ARGV[1], pieces or 0, expiry, short)
expire_viewed(4, ARGV[1], expiry)
if is_out_of_line(value) then
  redis.call('EXPIREAT', KEYS[3], expiry)
end
return expiry
