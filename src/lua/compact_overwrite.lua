-- Overwrites a live session's value for a caller that vouches for its
-- expiry (a tower-sessions save after a load in the same process): the
-- caller saw the session itself, the expiry it saw and the new one are
-- both past the latest the server's time can be, and the old and new
-- records both fit inline. The one check left is the one only the server
-- can make: that the session was not deleted or swept meanwhile. HSET says
-- whether it created the field; a created one is taken back out here, in
-- the same script, so no reader ever sees it. One Redis call in the
-- common case: this runs on every save.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the group's index ZSET
-- ARGV[1]: the field; ARGV[2]: the bucket's member in the index
-- ARGV[3]: the new value; ARGV[4]: the new expiry when it is earlier than
-- the one seen (the index entry may have to move earlier), else ''
-- Returns 1 if written, 0 if there is no session.
if redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) == 1 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 0
end
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[2], 'LT', ARGV[4], ARGV[2])
end
return 1
