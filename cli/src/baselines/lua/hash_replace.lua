-- Replaces a hash-per-session session's identity and attributes.
-- KEYS[1]: the session key
-- ARGV[1]: identity; ARGV[2]: attributes ('' for none)
-- ARGV[3]: '1' to write only if the stored ones equal ARGV[4] and ARGV[5]
-- Returns 1 if written, 0 if there is no live session, -1 on a mismatch.
local current = redis.call('HMGET', KEYS[1], 'i', 'a')
if not current[1] then
  return 0
end
if ARGV[3] == '1' and (current[1] ~= ARGV[4] or (current[2] or '') ~= ARGV[5]) then
  return -1
end
redis.call('HSET', KEYS[1], 'i', ARGV[1])
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'a')
else
  redis.call('HSET', KEYS[1], 'a', ARGV[2])
end
return 1
