-- Revokes one of a user's sessions, for a store with a user index.
-- KEYS[1..3], ARGV[1..2]: see compact_common.lua
-- ARGV[3]: the user's identity in decimal if it is an integer, else ''
-- ARGV[4]: the user's identity as a record begins with it (MessagePack)
-- ARGV[5]: the id's stamp; ARGV[6]: how long after its stamp a create of
--          the id may still land, by any server's clock
-- Returns 1 if the user's live session was removed; 0 if the session is
-- another user's (kept); 2 if there was none and a tombstone now blocks a
-- create still in flight; 3 if there was none and none can come.
local now = server_clock()
local value = live_value(now)
if value then
  local owned
  if is_integer_form(value) then
    local head = string.sub(value, 1, -11)
    if head == '' then
      head = '0'
    end
    owned = ARGV[3] ~= '' and head == ARGV[3]
  else
    local record = string.sub(value, 5)
    if record == OUT_OF_LINE then
      record = redis.call('GET', KEYS[3]) or ''
    end
    owned = string.sub(record, 1, #ARGV[4]) == ARGV[4]
  end
  if not owned then
    return 0
  end
  if is_out_of_line(value) then
    redis.call('DEL', KEYS[3])
  end
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
local hold = tonumber(ARGV[5]) + tonumber(ARGV[6])
if hold <= now then
  return 3
end
redis.call('HSET', KEYS[1], ARGV[1] .. TOMBSTONE, be32(hold) .. TOMBSTONE)
redis.call('ZADD', KEYS[2], 'LT', hold, ARGV[2])
return 2
