-- The common case of compact_save.lua and compact_touch.lua, on its own:
-- a live session whose record is kept in its bucket (whole in its value,
-- or in pieces) gets a new value and pieces (a save) or its value with a
-- new expiry (a touch; pieces hold no expiry and stay as they are).
-- Nothing else is included, since every helper a script defines is
-- created again on every call; anything out of the ordinary answers SLOW,
-- and the caller sends the full script, which decides it. For stores the
-- sweeper reclaims (no field TTLs) and that keep no viewed items, fixed or
-- growing: where a growing store's bucket lacks the field, it is checked
-- for its marker (compact_route.lua's check), and no count of its fields is
-- returned, so a save that would add fields to a growing store's bucket
-- (more pieces than before) is left to the full script, which returns the
-- count the caller splits by. Values are as compact_common.lua and
-- compact_pieces.lua describe.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the group's index ZSET
-- ARGV[1]: the field; ARGV[2]: the bucket's member in the index
-- ARGV[3]: the new value, or '' to keep the record and move the expiry
-- ARGV[4]: the new expiry, unix seconds
-- ARGV[5]: the latest the server's time can be by the caller's estimate
-- ARGV[6]: 'routed' for a growing store's bucket, 'marked' for one with
--          marks (record format 11), else ''
-- ARGV[7..]: the new record's pieces, when the new value is PIECED
-- Returns the new expiry if written, 0 if there is no session, SLOW (-9)
-- for the full script: an expiry within the estimate's reach of now (the
-- server's clock decides), a record out of line, a tombstone or forward
-- record under the field, a growing bucket gaining fields, viewed chunk
-- keys. A value in neither form is a CORRUPT error, nothing written.
local SLOW = -9
if #KEYS > 2 then
  return SLOW
end
-- Before record format 11 a bucket that holds the field is current (no
-- bucket outlived the split or merge that replaced it), so only a miss
-- reads the marker ('routed'). From it a replaced bucket stays a while as
-- a mark (shape_common.lua), which a plain create may write its field
-- into for a moment, so the marker is read with the value, in one HMGET
-- ('marked'): the common case is two commands on every form.
local mode = ARGV[6]
local value
if mode == 'marked' then
  local got = redis.call('HMGET', KEYS[1], '', ARGV[1])
  if not got[1] then
    return redis.error_reply('RESHAPED the bucket is not in the shape the caller routed by')
  end
  value = got[2]
else
  value = redis.call('HGET', KEYS[1], ARGV[1])
end
if not value then
  if mode == 'routed' and redis.call('HEXISTS', KEYS[1], '') == 0 then
    return redis.error_reply('RESHAPED the bucket is not in the shape the caller routed by')
  end
  return 0
end
local b1, b2, b3, b4, b5, b6 = string.byte(value, 1, 6)
local old, integer
-- The pieces the stored record continues in, and what their names begin
-- with: the session's field, or its short prefix (compact_pieces.lua).
local had = 0
local prefix = string.sub(ARGV[1], 1, 1) .. string.sub(ARGV[1], -6, -5)
local had_stem = ARGV[1]
if b1 >= 48 and b1 <= 57 and #value <= 19 and string.find(value, '^%d+$') then
  old, integer = tonumber(string.sub(value, -10)), true
elseif (b1 < 48 or b1 > 57) and #value >= 5 then
  if b5 == 195 and b6 then
    -- PIECED, then the count (CHECKED, 128, added for a checked payload;
    -- SHORT, 64, for short piece names).
    had = b6 % 64
    if b6 % 128 >= 64 then
      had_stem = prefix
    end
  elseif b5 >= 192 and b5 <= 195 then
    -- TOMBSTONE, OUT_OF_LINE, FORWARD: for the full script.
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
local pieces = #ARGV - 6
-- What the new pieces' names begin with.
local stem = ARGV[1]
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
  redis.call('HSET', KEYS[1], ARGV[1], new)
elseif pieces > 0 then
  if mode ~= '' and pieces > had then
    return SLOW
  end
  -- Short names where the new value allows them (SHORT in its count
  -- byte) and they are the stored record's own, or no other session's
  -- first piece is under the first; else long ones.
  local count = string.byte(new, 6)
  if count % 128 >= 64 then
    stem = prefix
    if had_stem ~= prefix and redis.call('HEXISTS', KEYS[1], prefix .. '\1') == 1 then
      stem = ARGV[1]
      new = string.sub(new, 1, 5) .. string.char(count - 64) .. string.sub(new, 7)
    end
  end
  local args = {ARGV[1], new}
  for i = 1, pieces do
    args[2 * i + 1] = stem .. string.char(i)
    args[2 * i + 2] = ARGV[i + 6]
  end
  redis.call('HSET', KEYS[1], unpack(args))
else
  redis.call('HSET', KEYS[1], ARGV[1], new)
end
-- A save's pieces the new record does not reuse go: beyond its own where
-- named alike, else all, but where short names are given up the first
-- stays as a hold (compact_pieces.lua's HOLD), so no other session takes
-- them while this one lives.
local from = stem == had_stem and pieces + 1 or 1
if ARGV[3] ~= '' and had > 0 and from == 1 and had_stem == prefix then
  redis.call('HSET', KEYS[1], prefix .. '\1', '\192')
  from = 2
end
if ARGV[3] ~= '' and had >= from then
  local gone = {}
  for i = from, had do
    gone[#gone + 1] = had_stem .. string.char(i)
  end
  redis.call('HDEL', KEYS[1], unpack(gone))
end
if expiry < old then
  redis.call('ZADD', KEYS[2], 'LT', expiry, ARGV[2])
end
return expiry
