-- Included by the compact scripts that sweep whole buckets.

-- Removes the fields `gone` from the bucket at `key` and sets its entry in
-- the group's index (KEYS[1]) to `earliest`, the earliest expiry left; nil
-- means the bucket is empty, and its key and entry go.
local function settle(key, member, gone, earliest)
  if earliest == nil then
    redis.call('DEL', key)
    redis.call('ZREM', KEYS[1], member)
    return
  end
  for j = 1, #gone, 1000 do
    redis.call('HDEL', key, unpack(gone, j, math.min(j + 999, #gone)))
  end
  redis.call('ZADD', KEYS[1], earliest, member)
end

