-- The common case of compact_save.lua and compact_touch.lua, on its own:
-- a live session whose record is kept whole in its value gets a new value
-- (a save) or its value with a new expiry (a touch). Nothing else is
-- included, since every helper a script defines is created again on every
-- call; anything out of the ordinary answers SLOW, and the caller sends
-- the full script, which decides it. For stores the sweeper reclaims
-- (no field TTLs) and that keep no viewed items, fixed or growing: a
-- growing store's bucket is checked for its marker in the same read
-- (compact_route.lua's check), and no count of its fields is returned,
-- since a rewrite adds none. Values are as compact_common.lua describes.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the group's index ZSET
-- ARGV[1]: the field; ARGV[2]: the bucket's member in the index
-- ARGV[3]: the new value, or '' to keep the record and move the expiry
-- ARGV[4]: the new expiry, unix seconds
-- ARGV[5]: the latest the server's time can be by the caller's estimate
-- ARGV[6]: 'routed' for a growing store's bucket, else absent
-- Returns the new expiry if written, 0 if there is no session, SLOW (-9)
-- for the full script: an expiry within the estimate's reach of now (the
-- server's clock decides), a record in pieces or out of line, viewed
-- chunk keys. A value in neither form is a CORRUPT error, nothing written.
local SLOW = -9
if #KEYS > 2 then
  return SLOW
end
local value
if ARGV[6] then
  local read = redis.call('HMGET', KEYS[1], '', ARGV[1])
  if not read[1] then
    return redis.error_reply('RESHAPED the bucket is not in the shape the caller routed by')
  end
  value = read[2]
else
  value = redis.call('HGET', KEYS[1], ARGV[1])
end
if not value then
  return 0
end
local b1, b2, b3, b4, b5 = string.byte(value, 1, 5)
local old, integer
if b1 >= 48 and b1 <= 57 and #value <= 19 and string.find(value, '^%d+$') then
  old, integer = tonumber(string.sub(value, -10)), true
elseif (b1 < 48 or b1 > 57) and #value >= 5 then
  -- A marker byte (OUT_OF_LINE, PIECED and the others): for the full
  -- script.
  if b5 >= 192 and b5 <= 195 then
    return SLOW
  end
  old = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
else
  return redis.error_reply('CORRUPT the bucket value is in neither the integer nor the binary form')
end
local expiry = tonumber(ARGV[4])
local latest = tonumber(ARGV[5])
if old <= latest or expiry <= latest then
  return SLOW
end
local new = ARGV[3]
if new == '' then
  if integer then
    local head = string.sub(value, 1, -11)
    if head == '' then
      new = string.format('%d', expiry)
    else
      new = head .. string.format('%010d', expiry)
    end
  else
    new = string.char(math.floor(expiry / 16777216) % 256, math.floor(expiry / 65536) % 256,
      math.floor(expiry / 256) % 256, expiry % 256) .. string.sub(value, 5)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], new)
if expiry < old then
  redis.call('ZADD', KEYS[2], 'LT', expiry, ARGV[2])
end
return expiry
