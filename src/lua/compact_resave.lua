-- A save of a session this process read, on a server without HSETEX
-- (src/session/layout/compact/plain.rs): its value and pieces are written,
-- named as the read found them, where its field is still there. From
-- record format 10 no live session gives up its short piece names
-- (compact_pieces.lua's HOLD), so where the field is, names that were its
-- own are its own still, or no one's. Two commands, no helpers.
-- KEYS[1]: the bucket's HASH
-- ARGV[1], ARGV[2]: the session's field and its new value, or in a
--                   growing store with marks '' and '1' (the marker, as
--                   it is), then those
-- ARGV[3..]: each piece's field and value
-- Returns 1 if written, 0 if the field is not there.
-- In a growing store with marks (record format 11) the bucket's marker
-- comes first, '' and '1', so a bucket split or merged away, which may
-- hold a create's field a moment (compact_add.lua), takes nothing.
if ARGV[1] == '' then
  -- The marker and the field in one read: two commands in all.
  local got = redis.call('HMGET', KEYS[1], '', ARGV[3])
  if not got[1] or not got[2] then
    return 0
  end
elseif redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
