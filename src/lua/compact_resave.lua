-- A save of a session this process read, on a server without HSETEX
-- (src/session/layout/compact/plain.rs): its value and pieces are written,
-- named as the read found them, where its field is still there. From
-- record format 10 no live session gives up its short piece names
-- (compact_pieces.lua's HOLD), so where the field is, names that were its
-- own are its own still, or no one's. Two commands, no helpers.
-- KEYS[1]: the bucket's HASH
-- ARGV[1], ARGV[2]: the session's field and its new value
-- ARGV[3..]: each piece's field and value
-- Returns 1 if written, 0 if the field is not there.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
