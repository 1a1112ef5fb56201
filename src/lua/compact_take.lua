-- Takes a live entry out of its bucket in one step (a one-time token's
-- consume): returns its value and, when its record is out of line, the
-- record; nil when there is no live entry. An expired one is reclaimed.
-- KEYS[1..3], ARGV[1..2]: see compact_common.lua
local now = server_clock()
local value = live_value(now)
if not value then
  return false
end
local side = ''
if is_out_of_line(value) then
  side = redis.call('GET', KEYS[3]) or ''
  redis.call('DEL', KEYS[3])
end
redis.call('HDEL', KEYS[1], ARGV[1])
return {value, side}
