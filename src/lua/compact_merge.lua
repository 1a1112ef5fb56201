-- Merges two sibling buckets of a growing store back into their parent
-- (shape_common.lua gives KEYS and ARGV): the reverse of compact_split.lua,
-- viewed chunks and all. The children's keys go (from record format 11
-- they stay a while as marks, shape_common.lua).
-- The parent's index entry is the earlier of the children's.
-- ARGV[3]: merge only children holding at most this many fields together
-- Returns {1, epoch} when merged (epoch the new shape's), {0, epoch} when
-- not: the children are not both buckets of the current shape, they hold
-- more, or two of their sessions would share short piece names
-- (merged_pairs).

-- Merges children `c0` and `c1` into `parent` below a byte's last bit
-- (`place` 0 to 6), the mirror of compact_split.lua's move_half: child 0's
-- fields are the parent's as they are, so child 0 becomes the parent
-- (RENAME, marker and all) and only child 1's fields are read, rewritten
-- (their bit at `place` set) and moved. Only for two listpacks (a child
-- the server converted, or one whose key is gone, goes through
-- merged_pairs, which writes the parent anew and so brings it back into a
-- listpack): returns whether it merged them.
local function merge_half(parent, c0, c1, place)
  if redis.call('OBJECT', 'ENCODING', c0) ~= 'listpack'
      or redis.call('OBJECT', 'ENCODING', c1) ~= 'listpack' then
    return false
  end
  local bit = 2 ^ (7 - place)
  redis.call('RENAME', c0, parent)
  local pairs = redis.call('HGETALL', c1)
  -- The marker again, whatever child 0 held.
  local moved = {MARKER, '1'}
  for i = 1, #pairs, 2 do
    local field = pairs[i]
    if field ~= MARKER then
      moved[#moved + 1] = string.char(string.byte(field, 1) + bit) .. string.sub(field, 2)
      moved[#moved + 1] = pairs[i + 1]
    end
  end
  hset_all(parent, moved)
  redis.call('DEL', c1)
  return true
end

local epoch, trie = current_shape()
local parent = tonumber(ARGV[1])
if not (is_leaf(trie, parent * 2) and is_leaf(trie, parent * 2 + 1))
    or fields_in(KEYS[3]) + fields_in(KEYS[4]) > tonumber(ARGV[3]) then
  return {0, epoch}
end
check_free(KEYS[2])
local place = tonumber(ARGV[2])
if place == 7 or not merge_half(KEYS[2], KEYS[3], KEYS[4], place) then
  local merged = merged_pairs(KEYS[3], KEYS[4], place, true)
  if not merged then
    return {0, epoch}
  end
  fill(KEYS[2], merged)
  redis.call('DEL', KEYS[3], KEYS[4])
end
mark_moved(KEYS[3])
mark_moved(KEYS[4])
local chunks, c0_chunks, c1_chunks = chunks_of(0), chunks_of(1), chunks_of(2)
for c = 1, #chunks do
  hset_all(chunks[c], merged_pairs(c0_chunks[c], c1_chunks[c], place, false))
  redis.call('DEL', c0_chunks[c], c1_chunks[c])
end
local first = redis.call('ZSCORE', KEYS[6], ARGV[5])
local second = redis.call('ZSCORE', KEYS[7], ARGV[6])
redis.call('ZREM', KEYS[6], ARGV[5])
redis.call('ZREM', KEYS[7], ARGV[6])
if first and second then
  first = math.min(tonumber(first), tonumber(second))
end
first = first or second
if first then
  redis.call('ZADD', KEYS[5], first, ARGV[4])
end
redis.call('HSET', KEYS[1], 'epoch', epoch + 1, 'trie', with_bit(trie, tonumber(ARGV[1]), false))
return {1, epoch + 1}
