-- Writes a live session's record and expiry together (a tower-sessions
-- save), where compact_rewrite.lua, which takes the common case, hands
-- one on: an expiry near now, a record out of line, a growing bucket
-- gaining fields, field TTLs, viewed items. No helpers but
-- compact_pieces.lua's and compact_expiry.lua's, and `TIME` only
-- when the caller's estimate of the server's clock cannot tell. The stored
-- expiry is always read: another process may have moved it earlier since
-- this one loaded the session, and a save never revives an expired one.
-- Values are as compact_common.lua describes.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the group's index ZSET;
-- KEYS[3]: the session's out-of-line record key
-- KEYS[4..]: the bucket's viewed chunks, where the store keeps them
-- ARGV[1]: the field; ARGV[2]: the bucket's member in the index
-- ARGV[3]: the new value; ARGV[4]: the new expiry, unix seconds
-- ARGV[5]: the record when it goes out of line, else ''
-- ARGV[6]: the latest the server's time can be by the caller's estimate
-- ARGV[7..]: the pieces of the new record, when the new value is PIECED
-- Returns 1 if written (or, for an expiry already past, removed), 0 if
-- there is no live session. A value in neither form is a CORRUPT error,
-- and nothing is written.
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then
  return 0
end
local old, was_out_of_line
local b1, b2, b3, b4 = string.byte(value, 1, 4)
if b1 >= 48 and b1 <= 57 and #value <= 19 and string.find(value, '^%d+$') then
  old, was_out_of_line = tonumber(string.sub(value, -10)), false
elseif (b1 < 48 or b1 > 57) and #value >= 5 then
  old = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  was_out_of_line = #value == 5 and string.byte(value, 5) == 193
else
  error({err = 'CORRUPT the bucket value is in neither the integer nor the binary form'})
end
local expiry = tonumber(ARGV[4])
local now = tonumber(ARGV[6])
if old <= now or expiry <= now then
  -- Within the estimate's reach of now: the server's own clock decides.
  now = tonumber(redis.call('TIME')[1])
end
if old <= now then
  -- Expired: the sweeper reclaims it; a save never revives it.
  return 0
end
if expiry <= now then
  drop_pieces(KEYS[1], ARGV[1], value)
  redis.call('HDEL', KEYS[1], ARGV[1])
  if was_out_of_line then
    redis.call('DEL', KEYS[3])
  end
  for k = 4, #KEYS do
    pcall(redis.call, 'HDEL', KEYS[k], ARGV[1])
  end
  return 1
end
-- The new pieces take short names where the caller's value allows them
-- (its SHORT set: the namespace's format has them) and short_is_free.
local count = #ARGV - 6
local new, short = ARGV[3], false
if count > 0 then
  local _, _, may = pieces_in(new)
  short = may == true and short_is_free(KEYS[1], ARGV[1], value)
  new = with_names(new, short)
end
replace_pieces(KEYS[1], ARGV[1], value, count, short, not SERVER_EXPIRY)
if count > 0 then
  local args = {ARGV[1], new}
  local names = piece_fields(ARGV[1], count, 1, short)
  for i = 1, count do
    args[#args + 1] = names[i]
    args[#args + 1] = ARGV[i + 6]
  end
  redis.call('HSET', KEYS[1], unpack(args))
  expire_pieces(KEYS[1], ARGV[1], count, expiry, short)
else
  redis.call('HSET', KEYS[1], ARGV[1], new)
end
expire_field(KEYS[1], ARGV[1], expiry)
if expiry ~= old then
  expire_viewed(4, ARGV[1], expiry)
end
if expiry < old then
  lower_index(expiry, ARGV[2])
end
if ARGV[5] ~= '' then
  redis.call('SET', KEYS[3], ARGV[5], 'EXAT', expiry)
elseif was_out_of_line then
  redis.call('DEL', KEYS[3])
end
return 1
