-- Removes a hash-per-session session.
-- KEYS[1]: the session key
-- ARGV[1]: '1' to remove only if the stored identity and attributes equal
-- ARGV[2] and ARGV[3]
-- Returns 1 if removed, 0 if there was no live session, -1 on a mismatch.
local current = redis.call('HMGET', KEYS[1], 'i', 'a')
if not current[1] then
  return 0
end
if ARGV[1] == '1' and (current[1] ~= ARGV[2] or (current[2] or '') ~= ARGV[3]) then
  return -1
end
redis.call('DEL', KEYS[1])
return 1
