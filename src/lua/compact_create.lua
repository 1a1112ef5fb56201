-- Creates a session whose record is in pieces under an id others may know
-- (an import, a takeover; one just drawn goes in a transaction, see
-- `insert_plain`), when the caller has decided
-- its expiry (the insert script covers the rest). Kept short, as
-- compact_save.lua is: no helpers but compact_pieces.lua's and
-- compact_expiry.lua's. The value first: a taken id writes nothing, and a
-- piece a delete left behind under one of these names is overwritten.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the group's index ZSET
-- ARGV[1]: the field; ARGV[2]: the bucket's member in the index
-- ARGV[3]: the value; ARGV[4]: the expiry, unix seconds
-- ARGV[5..]: the pieces
-- Returns 1 if created, 0 if the field is taken.
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3]) == 0 then
  return 0
end
local expiry = tonumber(ARGV[4])
local args = {}
for i = 5, #ARGV do
  args[#args + 1] = ARGV[1] .. string.char(i - 4)
  args[#args + 1] = ARGV[i]
end
if #args > 0 then
  redis.call('HSET', KEYS[1], unpack(args))
end
expire_field(KEYS[1], ARGV[1], expiry)
expire_pieces(KEYS[1], ARGV[1], #ARGV - 4, expiry)
-- A foreign key where the index goes: take the session back out.
local ok, err = pcall(lower_index, expiry, ARGV[2])
if not ok then
  redis.call('HDEL', KEYS[1], ARGV[1], unpack(piece_fields(ARGV[1], #ARGV - 4)))
  if type(err) == 'table' then
    return err
  end
  return redis.error_reply(err)
end
return 1
