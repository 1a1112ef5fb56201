-- Removes a session from its bucket. The index entry stays a lower bound;
-- the sweeper rescores it.
-- KEYS[1..], ARGV[1..2]: see compact_common.lua
-- ARGV[3]: '1' to remove only if the stored record is the expected one and
--          its expiry is ARGV[6]
-- ARGV[4], ARGV[5]: the expected identity in decimal (or '') and record
-- ARGV[6]: the expected expiry
-- Returns 1 if removed, 0 if there was no live session, -1 on a mismatch.
local now = server_clock()
local value, expiry = live_value(now)
if not value then
  return 0
end
if ARGV[3] == '1' and (expiry ~= tonumber(ARGV[6]) or not holds(value, ARGV[4], ARGV[5])) then
  return -1
end
drop_session(value)
return 1
