-- Takes a live entry out of its bucket in one step (a one-time token's
-- consume): returns its value and, when its record is out of line, the
-- record, or when it is in pieces, the pieces joined; nil when there is no
-- live entry (an expired one is left to the sweeper). Kept short, with no
-- helpers but compact_pieces.lua's, as compact_save.lua is: every consume
-- runs it. Values are as compact_common.lua describes.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the group's index ZSET (unused);
-- KEYS[3]: the entry's out-of-line record key
-- ARGV[1]: the field
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then
  return false
end
local expiry
local b1, b2, b3, b4 = string.byte(value, 1, 4)
if b1 >= 48 and b1 <= 57 and #value <= 19 and string.find(value, '^%d+$') then
  expiry = tonumber(string.sub(value, -10))
elseif (b1 < 48 or b1 > 57) and #value >= 5 then
  expiry = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
else
  error({err = 'CORRUPT the bucket value is in neither the integer nor the binary form'})
end
if expiry <= tonumber(redis.call('TIME')[1]) then
  return false
end
local side = ''
if #value == 5 and string.byte(value, 5) == 193 then
  side = redis.call('GET', KEYS[3]) or ''
  redis.call('DEL', KEYS[3])
end
local n, _, short = pieces_in(value)
if n and n > 0 then
  local fields = piece_fields(ARGV[1], n, 1, short)
  local parts = redis.call('HMGET', KEYS[1], unpack(fields))
  for i = 1, n do
    parts[i] = parts[i] or ''
  end
  side = table.concat(parts)
  redis.call('HDEL', KEYS[1], unpack(fields))
end
redis.call('HDEL', KEYS[1], ARGV[1])
return {value, side}
