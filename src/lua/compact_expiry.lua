-- Included by the compact scripts that write a field, after the line that
-- sets SERVER_EXPIRY (src/scripts.rs builds each such script twice).
-- With SERVER_EXPIRY the server expires fields itself (Redis 7.4+): each
-- field written carries its expiry as a field TTL as well (an HSET clears
-- one), and so do its viewed chunk fields; the group index, which only the
-- sweeper reads, is not kept. Without it, the bucket's index entry is
-- lowered to each expiry written, for the sweeper.

local function expire_field(key, field, expiry)
  if SERVER_EXPIRY then
    redis.call('HEXPIREAT', key, expiry, 'FIELDS', 1, field)
  end
end

-- The session's viewed chunk fields (KEYS[first..]) expire with it. A chunk
-- key of another type is not the store's: left alone.
local function expire_viewed(first, field, expiry)
  if SERVER_EXPIRY then
    for k = first, #KEYS do
      pcall(redis.call, 'HEXPIREAT', KEYS[k], expiry, 'FIELDS', 1, field)
    end
  end
end

local function lower_index(expiry, member)
  if not SERVER_EXPIRY then
    redis.call('ZADD', KEYS[2], 'LT', expiry, member)
  end
end
