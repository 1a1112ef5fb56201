-- Removes a hash-per-session session.
-- KEYS[1]: the session key
-- ARGV[1]: '1' to remove only if the stored identity, attributes and
-- expiry equal ARGV[2], ARGV[3] and ARGV[4]
-- Returns 1 if removed, 0 if there was no live session, -1 on a mismatch.
local current = redis.call('HMGET', KEYS[1], 'i', 'a', 'e')
if not current[1] then
  return 0
end
if ARGV[1] == '1' and (current[1] ~= ARGV[2] or (current[2] or '') ~= ARGV[3]
    or tonumber(current[3]) ~= tonumber(ARGV[4])) then
  return -1
end
redis.call('DEL', KEYS[1])
return 1
