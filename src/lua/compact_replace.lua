-- Replaces a live session's record, keeping its expiry.
-- KEYS[1..3], ARGV[1..2]: see compact_common.lua
-- ARGV[3], ARGV[4]: the new form and payload (see make_value)
-- ARGV[5]: '1' to write only if the stored record is the expected one
-- ARGV[6], ARGV[7]: the expected identity in decimal ('' unless the
--                   expected record is identity-only) and record
-- ARGV[8], ARGV[9]: for a store with a user index, the new record's
--                   identity in decimal (or '') and MessagePack head,
--                   when the caller has not written its index entry
-- Returns 1 if written, 0 if there is no live session, -1 on a mismatch,
-- -3 (nothing written) if the new record has another owner than the
-- stored one and ARGV[9] was given: the caller writes that owner's index
-- entry and sends the write again without it.
local now = server_clock()
local value, expiry = live_value(now)
if not value then
  return 0
end
if ARGV[5] == '1' and not holds(value, ARGV[6], ARGV[7]) then
  return -1
end
if ARGV[9] and not owned_by(value, ARGV[8], ARGV[9]) then
  return -3
end
local was_out_of_line = is_out_of_line(value)
local short = short_names(KEYS[1], ARGV[1], ARGV[3], ARGV[4], value)
redis.call('HSET', KEYS[1], ARGV[1], make_value(ARGV[3], ARGV[4], expiry, short))
expire_field(KEYS[1], ARGV[1], expiry)
write_pieces(KEYS[1], ARGV[1], ARGV[3], ARGV[4], expiry, value, short)
if ARGV[3] == 'o' then
  redis.call('SET', KEYS[3], ARGV[4], 'EXAT', expiry)
elseif was_out_of_line then
  redis.call('DEL', KEYS[3])
end
return 1
