-- The delete of a session the caller has not read (Compact::delete with no
-- seen length): its value tells what else goes, so whoever deletes a
-- session leaves none of its pieces and no out-of-line record, in one
-- step. No helpers (every helper a script defines is created again on
-- every call). Values are as compact_common.lua describes.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the group's index ZSET (unused)
-- KEYS[3]: the session's out-of-line record key
-- KEYS[4..]: the bucket's viewed chunks, where the store keeps viewed items
-- ARGV[1]: the field; ARGV[2]: the bucket's member in the index (unused)
-- ARGV[3]: 'routed' for a growing store's bucket, else ''
-- Returns {1 if there was a session to remove else 0, 0 if a growing
-- store's bucket lacks its marker (split or merged away: nothing done,
-- the caller routes again) else 1}.
local value
if ARGV[3] == 'routed' then
  local read = redis.call('HMGET', KEYS[1], '', ARGV[1])
  if not read[1] then
    return {0, 0}
  end
  value = read[2]
else
  value = redis.call('HGET', KEYS[1], ARGV[1])
end
for i = 4, #KEYS do
  redis.call('HDEL', KEYS[i], ARGV[1])
end
if not value then
  return {0, 1}
end
local fields = {ARGV[1]}
local b1, b5, n = string.byte(value, 1), string.byte(value, 5), string.byte(value, 6)
-- The integer form is all digits; a binary value's fifth byte may mark
-- the record as in pieces (PIECED, then their number) or out of line.
if b1 and (b1 < 48 or b1 > 57) then
  if b5 == 195 and n then
    for i = 1, n do
      fields[#fields + 1] = ARGV[1] .. string.char(i)
    end
  elseif b5 == 193 then
    redis.call('DEL', KEYS[3])
  end
end
redis.call('HDEL', KEYS[1], unpack(fields))
return {1, 1}
