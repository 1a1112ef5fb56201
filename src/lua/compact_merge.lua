-- Merges two sibling buckets of a growing store back into their parent
-- (shape_common.lua gives KEYS and ARGV): the reverse of compact_split.lua.
-- The parent's index entry is the earlier of the children's.
-- ARGV[3]: merge only children holding at most this many fields together
-- Returns {1, epoch} when merged (epoch the new shape's), {0, epoch} when
-- not: the children are not both buckets of the current shape, or they
-- hold more.
local epoch, trie = current_shape()
local parent = tonumber(ARGV[1])
if not (is_leaf(trie, parent * 2) and is_leaf(trie, parent * 2 + 1))
    or fields_in(KEYS[3]) + fields_in(KEYS[4]) > tonumber(ARGV[3]) then
  return {0, epoch}
end
check_free(KEYS[2])
local place = tonumber(ARGV[2])
local bit = 2 ^ (7 - place)
local merged = {}
for child = 0, 1 do
  local pairs = redis.call('HGETALL', KEYS[3 + child])
  for i = 1, #pairs, 2 do
    local field = pairs[i]
    if field ~= MARKER then
      if place == 7 then
        field = string.char(child) .. field
      else
        field = string.char(string.byte(field, 1) + child * bit) .. string.sub(field, 2)
      end
      merged[#merged + 1] = field
      merged[#merged + 1] = pairs[i + 1]
    end
  end
end
fill(KEYS[2], merged)
redis.call('DEL', KEYS[3], KEYS[4])
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
