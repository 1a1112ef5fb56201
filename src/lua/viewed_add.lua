-- Records items a live session viewed and rolls its expiry forward, in one
-- step (the book's update_token, packed; see src/viewed/mod.rs).
-- KEYS[1..3], ARGV[1..2]: see compact_common.lua
-- KEYS[4..]: the bucket's viewed chunks, in order
-- ARGV[3]: seconds from now for the new expiry, or '' to leave it
-- ARGV[4]: the items to keep; ARGV[5]: the most bytes in one chunk value;
-- ARGV[6]: the largest item's bytes
-- ARGV[7..]: the items viewed, oldest first, each as stored (its header byte,
--            then its bytes); each goes to the front, and an earlier view of
--            the same item is dropped
-- A list is its items newest first, each a header byte (its kind in the top
-- two bits, its length in the low six) and its bytes,
-- cut into chunks where the next item would pass ARGV[5]; so a chunk with
-- room for the largest item is the last. The work is done on whole
-- strings (one string.byte per item), as this runs on every page view.
-- Returns the session's expiry, or nil (nothing written) if it is not live.
-- The chunks are read first: a chunk key of another type fails the call
-- before anything is written. The list ends at the first missing chunk
-- (src/viewed/mod.rs reads it alike).
local keep, limit, widest = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local chunks, gap = {}, nil
for k = 4, #KEYS do
  local chunk = redis.call('HGET', KEYS[k], ARGV[1])
  if not chunk then
    gap = k
    break
  end
  chunks[#chunks + 1] = chunk
  if #chunk + 1 + widest <= limit then
    break
  end
end
local now, from = server_clock()
local value, expiry = live_value(now)
if not value then
  return false
end
if ARGV[3] ~= '' then
  expiry = from + tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], ARGV[1], with_expiry(value, expiry))
  expire_field(KEYS[1], ARGV[1], expiry)
  local pieces, _, short = pieces_in(value)
  expire_pieces(KEYS[1], ARGV[1], pieces or 0, expiry, short)
  if is_out_of_line(value) then
    redis.call('EXPIREAT', KEYS[3], expiry)
  end
end

-- `list` without the item encoded as `enc`, if it holds it.
local function without(list, enc)
  if not string.find(list, enc, 1, true) then
    return list
  end
  local pos = 1
  while pos <= #list do
    local size = 1 + string.byte(list, pos) % 64
    if string.sub(list, pos, pos + size - 1) == enc then
      return string.sub(list, 1, pos - 1) .. string.sub(list, pos + size)
    end
    pos = pos + size
  end
  return list
end

local old = table.concat(chunks)
local head = ''
for i = #ARGV, 7, -1 do
  local enc = ARGV[i]
  if without(head, enc) == head then
    head = head .. enc
    old = without(old, enc)
    local b = string.byte(enc, 1)
    if b >= 64 then
      -- The same item viewed before items carried their kind.
      old = without(old, string.char(b % 64) .. string.sub(enc, 2))
    end
  end
end
local list = head .. old
-- Cut after `keep` items, and into chunks.
local starts, count, pos, start = {}, 0, 1, 1
while pos <= #list and count < keep do
  local size = 1 + string.byte(list, pos) % 64
  if pos + size - start > limit then
    starts[#starts + 1] = start
    start = pos
  end
  pos = pos + size
  count = count + 1
end
local written = 0
if pos > 1 then
  starts[#starts + 1] = start
  starts[#starts + 1] = pos
  for c = 1, math.min(#starts - 1, #KEYS - 3) do
    local chunk = string.sub(list, starts[c], starts[c + 1] - 1)
    if chunk ~= chunks[c] then
      redis.call('HSET', KEYS[3 + c], ARGV[1], chunk)
      expire_field(KEYS[3 + c], ARGV[1], expiry)
    end
    written = c
  end
end
for c = written + 1, #chunks do
  redis.call('HDEL', KEYS[3 + c], ARGV[1])
end
-- A chunk missing where the list was read to goes with everything after
-- it: after an evicted chunk key, what follows is not the list's.
if gap then
  for k = math.max(gap + 1, 4 + written), #KEYS do
    redis.call('HDEL', KEYS[k], ARGV[1])
  end
end
-- Chunks left as they were keep their TTL: it moves with the expiry.
if ARGV[3] ~= '' then
  expire_viewed(4, ARGV[1], expiry)
end
return expiry
