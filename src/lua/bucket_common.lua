-- Shared by the bucket scripts; prepended to each. Every key a bucket script
-- touches comes in KEYS, all three under one hash tag:
-- KEYS[1]: the bucket's HASH, field -> record (or OUT_OF_LINE)
-- KEYS[2]: the bucket's ZSET, field -> expiry in unix seconds
-- KEYS[3]: the session's out-of-line record key
-- ARGV[1]: the field
-- Reads come before writes in every script, so a WRONGTYPE error aborts
-- before anything has changed.

-- 0xc1 is never used by MessagePack, and records start with an integer.
local OUT_OF_LINE = '\193'

-- The server's clock in whole seconds: a session is live while now < expiry.
local function server_now()
  return tonumber(redis.call('TIME')[1])
end

-- The expiry for a lifetime of `ttl` seconds from now, rounded up so that a
-- session lives at least `ttl` seconds (and less than `ttl` + 1).
local function expiry_in(ttl)
  local t = redis.call('TIME')
  local now = tonumber(t[1])
  if t[2] ~= '0' then
    now = now + 1
  end
  return now + tonumber(ttl)
end

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

-- The stored record bytes and whether they live out of line.
local function current_record()
  local record = redis.call('HGET', KEYS[1], ARGV[1])
  if record == OUT_OF_LINE then
    return redis.call('GET', KEYS[3]), true
  end
  return record, false
end

-- Writes a record for a session whose expiry is known.
local function write_record(record, inline, expiry, was_out_of_line)
  if inline == '1' then
    redis.call('HSET', KEYS[1], ARGV[1], record)
    if was_out_of_line then
      redis.call('DEL', KEYS[3])
    end
  else
    redis.call('SET', KEYS[3], record, 'EXAT', expiry)
    redis.call('HSET', KEYS[1], ARGV[1], OUT_OF_LINE)
  end
end

