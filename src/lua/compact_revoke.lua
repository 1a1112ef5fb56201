-- Revokes one session of a user, for a store with a user index; or, for
-- the sweeper, settles an index entry whose session looked gone.
-- KEYS[1..], ARGV[1..2]: see compact_common.lua
-- ARGV[3]: the user's identity in decimal if it is an integer, else ''
-- ARGV[4]: the user's identity as a record begins with it (MessagePack);
--          '' (with ARGV[3] '') for the sweeper: a live session is kept
-- ARGV[5]: how long a create whose index entry was already written may
--          still land, by any server's clock (the grace and twice the skew)
-- Returns 1 if the user's live session was removed; 0 if a live session
-- is kept (another user's, or any for the sweeper, or a value in neither
-- form); 2 if there was none,
-- and a tombstone now refuses a create of it for ARGV[5] seconds; 3 if
-- it had expired (and is reclaimed here): created once, so no create of
-- it can be in flight.
local now = server_clock()
local value = redis.call('HGET', KEYS[1], ARGV[1])
local expiry = value and expiry_of(value)
if value and not expiry then
  -- In neither form: no one's session, left for inspection.
  return 0
end
if value and expiry <= now then
  if is_out_of_line(value) then
    redis.call('DEL', KEYS[3])
  end
  redis.call('HDEL', KEYS[1], ARGV[1])
  drop_viewed(ARGV[1])
  return 3
end
if value then
  local owned = owned_by(value, ARGV[3], ARGV[4])
  if not owned then
    return 0
  end
  if is_out_of_line(value) then
    redis.call('DEL', KEYS[3])
  end
  redis.call('HDEL', KEYS[1], ARGV[1])
  drop_viewed(ARGV[1])
  return 1
end
local until_ = now + tonumber(ARGV[5])
redis.call('HSET', KEYS[1], ARGV[1] .. TOMBSTONE, be32(until_) .. TOMBSTONE)
redis.call('ZADD', KEYS[2], 'LT', until_, ARGV[2])
return 2
