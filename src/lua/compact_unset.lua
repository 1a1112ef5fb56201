-- The common case of compact_delete.lua on its own: removes a session
-- whose value it finds, with the pieces that value names (short names are
-- another session's once this one is gone, so only its value tells whose
-- they are: compact_pieces.lua) and its out-of-line record's key, in two
-- commands and one step, no helpers. Where there is no field it removes
-- nothing and says so; the caller sends compact_delete.lua, which also
-- tells a growing store's bucket split or merged away by its marker. For
-- stores that keep no viewed items. A first short piece the session left
-- as a hold (compact_pieces.lua's HOLD) is left to the sweeper.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the session's out-of-line record key
-- ARGV[1]: the session's field
-- ARGV[2]: 'marked' in a growing store with marks (record format 11): a
--          bucket without its marker is a mark, whose fields are no
--          session's (shape_common.lua), and nothing is removed
-- Returns 1 if the field was removed, 0 if it was not there.
local value
if ARGV[2] == 'marked' then
  -- The marker and the value in one read: two commands in all.
  local got = redis.call('HMGET', KEYS[1], '', ARGV[1])
  if not got[1] then
    return 0
  end
  value = got[2]
else
  value = redis.call('HGET', KEYS[1], ARGV[1])
end
if not value then
  return 0
end
local fields = {ARGV[1]}
local b5, b6 = string.byte(value, 5, 6)
if #value >= 6 and b5 == 195 and (string.byte(value, 1) < 48 or string.byte(value, 1) > 57) then
  -- PIECED, then the count: its low six bits the pieces, SHORT (64) for
  -- short names.
  local stem = ARGV[1]
  if b6 % 128 >= 64 then
    stem = string.sub(ARGV[1], 1, 1) .. string.sub(ARGV[1], -6, -5)
  end
  for i = 1, b6 % 64 do
    fields[#fields + 1] = stem .. string.char(i)
  end
elseif #value == 5 and b5 == 193 then
  redis.call('DEL', KEYS[2])
end
redis.call('HDEL', KEYS[1], unpack(fields))
return 1
