-- Included by the compact scripts that sweep whole buckets.

-- Removes the fields `gone` from the bucket at `key`, and from its viewed
-- chunk keys `viewed`, and sets its entry in the group's index (KEYS[1]) to
-- `earliest`, the earliest expiry left; nil means the bucket is empty, and
-- its key, its chunk keys and its entry go.
local function settle(key, member, gone, earliest, viewed)
  if earliest == nil then
    redis.call('DEL', key)
    for _, chunk in ipairs(viewed) do
      redis.call('DEL', chunk)
    end
    redis.call('ZREM', KEYS[1], member)
    return
  end
  for j = 1, #gone, 1000 do
    local part = {unpack(gone, j, math.min(j + 999, #gone))}
    redis.call('HDEL', key, unpack(part))
    for _, chunk in ipairs(viewed) do
      -- A chunk key of another type is not the store's: left alone.
      pcall(redis.call, 'HDEL', chunk, unpack(part))
    end
  end
  redis.call('ZADD', KEYS[1], earliest, member)
end

-- The viewed chunk keys of the i-th of n buckets (src/viewed/mod.rs): a
-- group script names them after all n bucket keys, the first of which is
-- KEYS[first], bucket by bucket; none where the store keeps no viewed items.
local function viewed_of(i, n, first)
  local per = (#KEYS - first + 1 - n) / n
  local from = first + n + (i - 1) * per
  local keys = {}
  for k = from, from + per - 1 do
    keys[#keys + 1] = KEYS[k]
  end
  return keys
end

