-- Included by the bucket scripts that act on a live session only.

-- The live session's expiry, or nil. An expired entry found here is
-- reclaimed on the spot, whether or not a sweeper has been by.
local function live_expiry(now)
  local expiry = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if not expiry then
    return nil
  end
  expiry = tonumber(expiry)
  if expiry > now then
    return expiry
  end
  if redis.call('HGET', KEYS[1], ARGV[1]) == OUT_OF_LINE then
    redis.call('DEL', KEYS[3])
  end
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return nil
end

