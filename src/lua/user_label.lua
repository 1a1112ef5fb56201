-- Sets the value of an existing user index entry (its check and label).
-- KEYS[1]: the user index bucket
-- ARGV[1]: the entry's field (a session id); ARGV[2]: its new value
-- Returns 1 if set, 0 if there is no such entry (none is created).
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
