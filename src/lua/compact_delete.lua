-- Removes a session whatever its value holds, in one step: its field, the
-- pieces its value names (short names are another session's once this
-- one is gone, so only its value tells whose they are: compact_pieces.lua),
-- its out-of-line record's key, its fields in the bucket's viewed chunks;
-- with whether the bucket holds its marker, so a growing store's caller
-- tells a bucket split or merged away from one the session is not in.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the session's out-of-line record key
-- KEYS[3..]: the bucket's viewed chunks
-- ARGV[1]: the session's field
-- Returns {1 if there was a field to remove, else 0; 1 if the bucket holds
-- its marker, else 0}.
local marked = redis.call('HEXISTS', KEYS[1], '')
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then
  return {0, marked}
end
drop_pieces(KEYS[1], ARGV[1], value)
redis.call('HDEL', KEYS[1], ARGV[1])
if #value == 5 and string.byte(value, 5) == 193 then
  redis.call('DEL', KEYS[2])
end
for k = 3, #KEYS do
  -- A chunk key of another type is not the store's: left alone.
  pcall(redis.call, 'HDEL', KEYS[k], ARGV[1])
end
return {1, marked}
