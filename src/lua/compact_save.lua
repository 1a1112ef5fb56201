-- Writes a live session's record and expiry together (a tower-sessions
-- save). No TIME call: the caller passes the latest the server's time can
-- be by its estimate, so a session this script judges live is live.
-- KEYS[1..3], ARGV[1..2]: see compact_common.lua
-- ARGV[3], ARGV[4]: the new form and payload (see make_value)
-- ARGV[5]: the new expiry, unix seconds
-- ARGV[6]: the caller's latest estimate of the server's time, unix seconds
-- Returns 1 if written (or, for an expiry already past, removed), 0 if
-- there is no live session.
local now = tonumber(ARGV[6])
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then
  return 0
end
local old = expiry_of(value)
if old <= now then
  -- Expired: the sweeper reclaims it; a save never revives it.
  return 0
end
local expiry = tonumber(ARGV[5])
local was_out_of_line = is_out_of_line(value)
if expiry <= now then
  redis.call('HDEL', KEYS[1], ARGV[1])
  if was_out_of_line then
    redis.call('DEL', KEYS[3])
  end
  return 1
end
redis.call('HSET', KEYS[1], ARGV[1], make_value(ARGV[3], ARGV[4], expiry))
if expiry < old then
  redis.call('ZADD', KEYS[2], 'LT', expiry, ARGV[2])
end
if ARGV[3] == 'o' then
  redis.call('SET', KEYS[3], ARGV[4], 'EXAT', expiry)
elseif was_out_of_line then
  redis.call('DEL', KEYS[3])
end
return 1
