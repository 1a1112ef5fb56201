-- Records a rotation's new id beside the live session it copies, for a
-- store with a user index: the copy's index entry is already written, the
-- copy itself not yet. A revocation that reaches the old id then finds the
-- new one too (compact_revoke.lua), however the rotation and the
-- revocation interleave.
-- KEYS[1..2], ARGV[1..2]: see compact_common.lua (the old session's)
-- ARGV[3]: the new id; ARGV[4]: the id an earlier attempt of the same
--          rotation recorded and has removed since, or ''
-- ARGV[5]: how long the record lasts (the user index's hold)
-- ARGV[6]: the length of an id in bytes
-- Returns 1 if recorded; 0 if the old session is not live (nothing
-- written); -1 if three other rotations of it are in flight (nothing
-- written).
local now = server_clock()
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value or session_expiry(value) <= now then
  return 0
end
local field = ARGV[1] .. FORWARD
local stored = redis.call('HGET', KEYS[1], field)
local n = tonumber(ARGV[6])
local ids = {}
if stored then
  for i = 6, #stored, n do
    local id = string.sub(stored, i, i + n - 1)
    if id ~= ARGV[4] then
      ids[#ids + 1] = id
    end
  end
end
if #ids >= 3 then
  return -1
end
ids[#ids + 1] = ARGV[3]
local until_ = now + tonumber(ARGV[5])
redis.call('HSET', KEYS[1], field, be32(until_) .. FORWARD .. table.concat(ids))
expire_field(KEYS[1], field, until_)
lower_index(until_, ARGV[2])
return 1
