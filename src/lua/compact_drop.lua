-- Removes a session this process has not read, in one step: its fields in
-- its bucket, its out-of-line record's key where named, and its fields in
-- the bucket's viewed chunks; with whether the bucket holds its marker, so
-- a growing store's caller tells a bucket split or merged away from one
-- the session is simply not in.
-- KEYS[1]: the bucket's HASH
-- KEYS[2]: the session's out-of-line record key, where ARGV[1] is '1'
-- KEYS[3..] (KEYS[2..] where ARGV[1] is '0'): the bucket's viewed chunks
-- ARGV[1]: '1' where KEYS[2] is the out-of-line key; ARGV[2]: the
-- session's field; ARGV[3..]: the fields to remove from the bucket
-- Returns {fields removed from the bucket, 1 if the bucket holds its
-- marker, else 0}.
local marked = redis.call('HEXISTS', KEYS[1], '')
local removed = redis.call('HDEL', KEYS[1], unpack(ARGV, 3))
local first = 2
if ARGV[1] == '1' then
  redis.call('DEL', KEYS[2])
  first = 3
end
for k = first, #KEYS do
  -- A chunk key of another type is not the store's: left alone.
  pcall(redis.call, 'HDEL', KEYS[k], ARGV[2])
end
return {removed, marked}
