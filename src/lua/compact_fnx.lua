-- A plain create's write on a server without HSETEX
-- (src/session/layout/compact/plain_create.rs): what `HSETEX key FNX
-- FIELDS n field value ...` does on Redis 8.0 and Valkey 9.0, every field
-- written where none of them is there, else nothing. Two commands, no
-- helpers; the caller's pipeline lowers the index entry before it and, in
-- a growing store, reads the marker, the field and the count after it.
-- KEYS[1]: the bucket's HASH
-- ARGV: each field and its value: the session's, then its pieces'
-- Returns 1 if written, 0 if any field is there.
local names = {}
for i = 1, #ARGV, 2 do
  names[#names + 1] = ARGV[i]
end
local found = redis.call('HMGET', KEYS[1], unpack(names))
for i = 1, #found do
  if found[i] then
    return 0
  end
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
