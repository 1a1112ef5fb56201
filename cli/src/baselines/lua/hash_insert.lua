-- Inserts a session stored as its own HASH (hash-per-session).
-- KEYS[1]: the session key
-- ARGV[1]: identity (decimal, or a non-integer one's MessagePack); ARGV[2]: attributes ('' for none)
-- ARGV[3]: 'in' or 'at'; ARGV[4]: seconds (see requested_expiry)
-- Returns the expiry; 0 if the key exists; -1 if an 'at' expiry has passed.
local expiry = requested_expiry(ARGV[3], ARGV[4])
if not expiry then
  return -1
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if ARGV[2] == '' then
  redis.call('HSET', KEYS[1], 'i', ARGV[1], 'e', expiry)
else
  redis.call('HSET', KEYS[1], 'i', ARGV[1], 'e', expiry, 'a', ARGV[2])
end
redis.call('EXPIREAT', KEYS[1], expiry)
return expiry
