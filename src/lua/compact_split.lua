-- Splits a growing store's bucket in two (shape_common.lua gives KEYS and
-- ARGV): each field goes to the child its next bit names, rewritten for
-- the child's level (below a byte's last bit only child 1's fields move,
-- see move_half below), and so does each field of its viewed chunks; the
-- bucket's index entry, a lower bound of its earliest expiry, becomes each
-- child's; the bucket's key goes, marker and all, so a caller routing by
-- the old shape finds no marker there (from record format 11 it stays a
-- while as a mark, shape_common.lua).
-- ARGV[3]: split only a bucket holding more fields than this (0: any),
--          so callers that all saw the bucket full split it once
-- Returns {1, epoch} when split (epoch the new shape's), {0, epoch} when
-- not: the bucket is not one of the current shape, not that full, or all
-- one session's.

-- Splits bucket `parent` by the bit at `place` (0 to 6) where a field's
-- first byte keeps its next bit: child 0's fields, whose bit is 0, are the
-- parent's as they are, so the parent becomes child 0 (RENAME, marker and
-- all) and only child 1's fields are read, rewritten and moved. About
-- half the fields move, and none goes through the script twice. A
-- field's first byte has every bit above `place` clear (they are its
-- bucket's), so child 1's fields are those whose first byte lies in
-- [bit, 2 bit): one range, which the server's HSCAN MATCH picks out with
-- their values, where reading every name into the script to test its bit
-- cost more than the rest of the split. (No endpoint is a byte the
-- pattern treats specially: '^', '-', ']' or '\'.) Only for a bucket in
-- a listpack, which HSCAN returns whole in one page (one the server
-- converted, its limits lowered under it, is written anew in both
-- children, which brings them back into listpacks): returns whether it
-- split the bucket.
local function move_half(parent, c0, c1, place)
  if redis.call('OBJECT', 'ENCODING', parent) ~= 'listpack' then
    return false
  end
  local bit = 2 ^ (7 - place)
  local pattern = '[' .. string.char(bit) .. '-' .. string.char(2 * bit - 1) .. ']*'
  local moved = {MARKER, '1'}
  local names = {}
  redis.call('RENAME', parent, c0)
  local cursor = '0'
  repeat
    local page = redis.call('HSCAN', c0, cursor, 'MATCH', pattern, 'COUNT', 1000)
    cursor = page[1]
    local found = page[2]
    for i = 1, #found, 2 do
      local field = found[i]
      names[#names + 1] = field
      moved[#moved + 1] = string.char(string.byte(field, 1) - bit) .. string.sub(field, 2)
      moved[#moved + 1] = found[i + 1]
    end
  until cursor == '0'
  for j = 1, #names, 1000 do
    redis.call('HDEL', c0, unpack(names, j, math.min(j + 999, #names)))
  end
  hset_all(c1, moved)
  return true
end

-- Whether `key` holds fields of two sessions or more: fields whose first
-- session_field_len bytes differ. A bucket one session fills (its pieces
-- over the split limit, where the server's entry limit is low) is not
-- split: no bit below would part it, and splitting it to the deepest
-- level only reshapes it under every call.
local function holds_sessions(key)
  local fields = redis.call('HKEYS', key)
  local width = session_field_len(fields, 1)
  local first
  for _, field in ipairs(fields) do
    if #field > 4 then
      local own = string.sub(field, 1, width)
      if not first then
        first = own
      elseif own ~= first then
        return true
      end
    end
  end
  return false
end

-- The most fields one session keeps in its bucket (its own, 15 pieces
-- under long names, a revocation's tombstone, a rotation's forward
-- record, a user index's marker: 19), with room to spare: a bucket
-- holding more holds two sessions at least, and its names are not read
-- to tell.
local ONE_SESSION_MOST = 32

local epoch, trie = current_shape()
local held = fields_in(KEYS[2])
if not is_leaf(trie, tonumber(ARGV[1])) or held <= tonumber(ARGV[3])
    or (held <= ONE_SESSION_MOST and not holds_sessions(KEYS[2])) then
  return {0, epoch}
end
check_free(KEYS[3], KEYS[4])
local place = tonumber(ARGV[2])
if place == 7 or not move_half(KEYS[2], KEYS[3], KEYS[4], place) then
  local halves = split_pairs(KEYS[2], place, true)
  fill(KEYS[3], halves[1])
  fill(KEYS[4], halves[2])
  redis.call('DEL', KEYS[2])
end
mark_moved(KEYS[2])
local chunks, c0_chunks, c1_chunks = chunks_of(0), chunks_of(1), chunks_of(2)
for c = 1, #chunks do
  local chunk = split_pairs(chunks[c], place, false)
  hset_all(c0_chunks[c], chunk[1])
  hset_all(c1_chunks[c], chunk[2])
  redis.call('DEL', chunks[c])
end
local score = redis.call('ZSCORE', KEYS[5], ARGV[4])
if score then
  redis.call('ZREM', KEYS[5], ARGV[4])
  if KEYS[6] == KEYS[7] then
    redis.call('ZADD', KEYS[6], score, ARGV[5], score, ARGV[6])
  else
    redis.call('ZADD', KEYS[6], score, ARGV[5])
    redis.call('ZADD', KEYS[7], score, ARGV[6])
  end
end
redis.call('HSET', KEYS[1], 'epoch', epoch + 1, 'trie', with_bit(trie, tonumber(ARGV[1]), true))
return {1, epoch + 1}
