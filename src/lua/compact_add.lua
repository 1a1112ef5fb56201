-- A new session whose record is kept in its bucket (whole in its value, or
-- in pieces), in a growing store's bucket (compact_route.lua checks the
-- route first): the common case of compact_insert.lua on its own, with the
-- expiry decided by the caller and no helpers (every helper a script
-- defines is created again on every call). Values are as
-- compact_common.lua describes. The value first: a taken id writes
-- nothing, and a piece a delete left behind under one of these names is
-- overwritten before anyone can read it.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the group's index ZSET
-- ARGV[1]: the field; ARGV[2]: the bucket's member in the index
-- ARGV[3]: the value; ARGV[4]: its expiry, unix seconds
-- ARGV[5..]: the pieces, if any
-- Returns the expiry if created, 0 if the field is taken.
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3]) == 0 then
  return 0
end
local fields = {ARGV[1]}
if #ARGV > 4 then
  local args = {}
  for i = 5, #ARGV do
    local field = ARGV[1] .. string.char(i - 4)
    fields[#fields + 1] = field
    args[#args + 1] = field
    args[#args + 1] = ARGV[i]
  end
  redis.call('HSET', KEYS[1], unpack(args))
end
local expiry = tonumber(ARGV[4])
-- A foreign key where the index goes: take the session back out and report.
local ok, err = pcall(redis.call, 'ZADD', KEYS[2], 'LT', expiry, ARGV[2])
if not ok then
  redis.call('HDEL', KEYS[1], unpack(fields))
  if type(err) == 'table' then
    return err
  end
  return redis.error_reply(err)
end
return expiry
