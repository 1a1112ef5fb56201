-- Shared by the scripts that split and merge a growing store's buckets
-- (src/session/shape.rs). Every key comes in KEYS, all of one group:
-- KEYS[1]: the group's shape HASH: `epoch`, and `trie`, the bitmap of split
--          nodes (bit n, most significant bit first, is node n)
-- KEYS[2]: the parent's bucket; KEYS[3], KEYS[4]: its children's, the ids
--          whose next bit is 0, then 1
-- KEYS[5]: the parent's index ZSET; KEYS[6], KEYS[7]: the children's (all
--          one key within a band; at a band's first depth each child is
--          its own index node)
-- ARGV[1]: the parent's node
-- ARGV[2]: the place, 0 (top) to 7, of the bit that chooses the child in
--          the first byte of the parent's fields; at 7 the children's
--          fields are one byte shorter
-- ARGV[3]: the limit on the fields moved (see each script)
-- ARGV[4]: the parent's member in its index; ARGV[5], ARGV[6]: the
--          children's
-- ARGV[7]: m, the viewed chunks each bucket has (src/viewed/mod.rs), 0
--          where the store keeps no viewed items; KEYS[8..7 + m] are the
--          parent's, KEYS[8 + m..7 + 2m] and KEYS[8 + 2m..7 + 3m] its
--          children's. A chunk's fields are its bucket's session fields,
--          rewritten as they are.
-- ARGV[8]: s, seconds a bucket key the script replaces stays as a mark
--          (record format 11: a HASH of the one field MOVED, expiring),
--          0 where it goes at once. A plain create routed by a shape
--          some seconds old may write into a replaced bucket; the mark is
--          there to take it (it finds no marker and takes it back), and
--          goes with it if the writer never does.
-- Each script checks the nodes against the shape it finds (not the epoch
-- the caller read): a split of another bucket of the group meanwhile
-- changes nothing for these.
-- A field begins with the session's field whatever it holds (a value, a
-- piece, a marker of the user index), so the same rewrite moves them all;
-- the marker '' is each bucket's own. Values move as they are.

local MARKER = ''
-- The field of a mark: no session's, no piece's (a piece's name ends in a
-- byte up to 15), and a byte no value begins with in the sweeper's reading.
local MOVED = '\255'

-- The shape's epoch and trie.
local function current_shape()
  local shape = redis.call('HMGET', KEYS[1], 'epoch', 'trie')
  local epoch = tonumber(shape[1] or '0')
  if not epoch then
    error({err = 'CORRUPT the group shape epoch is not a number: ' .. KEYS[1]})
  end
  return epoch, shape[2] or ''
end

-- Whether node `n` is split in `trie`.
local function is_split(trie, n)
  local at = math.floor(n / 8) + 1
  if at > #trie then
    return false
  end
  return math.floor(string.byte(trie, at) / 2 ^ (7 - n % 8)) % 2 == 1
end

-- Whether node `n` is a bucket of `trie`: every ancestor split, itself not.
local function is_leaf(trie, n)
  if is_split(trie, n) then
    return false
  end
  n = math.floor(n / 2)
  while n >= 1 do
    if not is_split(trie, n) then
      return false
    end
    n = math.floor(n / 2)
  end
  return true
end

-- `trie` with bit `n` set to `on`.
local function with_bit(trie, n, on)
  local at = math.floor(n / 8) + 1
  if #trie < at then
    trie = trie .. string.rep('\0', at - #trie)
  end
  local byte = string.byte(trie, at)
  local mask = 2 ^ (7 - n % 8)
  local set = math.floor(byte / mask) % 2 == 1
  if on and not set then
    byte = byte + mask
  elseif set and not on then
    byte = byte - mask
  end
  return string.sub(trie, 1, at - 1) .. string.char(byte) .. string.sub(trie, at + 1)
end

-- Writes `pairs` (field, value, ...) into `key`.
local function hset_all(key, pairs)
  for j = 1, #pairs, 1000 do
    redis.call('HSET', key, unpack(pairs, j, math.min(j + 999, #pairs)))
  end
end

-- Writes `pairs` into a new bucket `key`, the marker first, so a read
-- finds it at once.
local function fill(key, pairs)
  redis.call('HSET', key, MARKER, '1')
  hset_all(key, pairs)
end

-- The viewed chunk keys of the parent (0), or of child 1 or 2.
local function chunks_of(which)
  local m = tonumber(ARGV[7] or '0')
  local keys = {}
  for c = 1, m do
    keys[c] = KEYS[7 + which * m + c]
  end
  return keys
end

-- Short piece names (compact_pieces.lua) begin with their session
-- field's first byte, which a split or merge below a byte's last bit
-- rewrites for them as for the field. At a byte's last bit (`place` 7)
-- the first byte goes or comes, and the names are made anew from their
-- owners'.

-- The length of a session's field among a bucket's field names, every
-- `step`-th of `names` from the first (2 for an HGETALL reply): every field
-- of a session but its short piece names (four bytes) begins with its
-- shortest, the session's own, so it is the shortest past four (nil for
-- none).
local function session_field_len(names, step)
  local len
  for i = 1, #names, step do
    local l = #names[i]
    if l > 4 and (not len or l < len) then
      len = l
    end
  end
  return len
end

-- What the short piece names (compact_pieces.lua) of a bucket's HGETALL
-- reply `pairs` begin with: the field of the session whose value names
-- them (owner_of), and the sessions of each prefix (holders), with whom a
-- first short piece no value names stays (a hold, compact_pieces.lua).
local function short_names(pairs)
  local len = session_field_len(pairs, 2)
  local owner_of, holders = {}, {}
  for i = 1, #pairs, 2 do
    local field = pairs[i]
    if #field == len then
      local prefix = short_prefix(field)
      local n, _, short = pieces_in(pairs[i + 1])
      if short and n > 0 then
        owner_of[prefix] = field
      end
      local of = holders[prefix]
      if of then
        of[#of + 1] = field
      else
        holders[prefix] = {field}
      end
    end
  end
  return owner_of, holders
end

local function is_short_piece(field)
  return #field == 4 and string.byte(field, 4) <= 15
end

-- The sessions a hold `field` stays with (none for a short piece that is
-- no hold, or whose prefix no session has).
local function holders_of(field, holders)
  if string.byte(field, 4) ~= 1 then
    return {}
  end
  return holders[string.sub(field, 1, 3)] or {}
end

-- Splits the fields of `key` (but the marker) into the two children's,
-- rewritten for their level by the bit at `place`: {child 0's pairs,
-- child 1's pairs}. `bucket` is whether `key` is a bucket, whose short
-- piece names are made anew at place 7 (a viewed chunk holds none): a
-- hold once for each session of its prefix, and a short piece no session
-- names is dropped. (At place 7 a child's fields all begin with one byte,
-- the bit split by, so names made anew from different prefixes differ.)
local function split_pairs(key, place, bucket)
  local bit = 2 ^ (7 - place)
  local halves = {{}, {}}
  local pairs = redis.call('HGETALL', key)
  local owner_of, holders = {}, {}
  if place == 7 and bucket then
    owner_of, holders = short_names(pairs)
  end
  for i = 1, #pairs, 2 do
    local field = pairs[i]
    if field ~= MARKER then
      local first = string.byte(field, 1)
      local half = halves[math.floor(first / bit) % 2 + 1]
      if place ~= 7 then
        field = string.char(first % bit) .. string.sub(field, 2)
      elseif bucket and is_short_piece(field) then
        local owner = owner_of[string.sub(field, 1, 3)]
        if owner then
          -- The owner's field loses its first byte: its second begins the
          -- names now.
          field = string.sub(owner, 2, 2) .. string.sub(field, 2)
        else
          for _, holder in ipairs(holders_of(field, holders)) do
            half[#half + 1] = string.sub(holder, 2, 2) .. string.sub(field, 2)
            half[#half + 1] = pairs[i + 1]
          end
          field = nil
        end
      else
        field = string.sub(field, 2)
      end
      if field then
        half[#half + 1] = field
        half[#half + 1] = pairs[i + 1]
      end
    end
  end
  return halves
end

-- The fields of the children's `c0` and `c1` (but their markers),
-- rewritten for the parent's level by the bit at `place`; nil where the
-- merge would give two sessions the same short names. At place 7 each
-- child's fields gain a first byte, its number, the same for them all,
-- and short names begin with it in place of the byte they began with:
-- two sessions of a child that both hold short names (pieces or a hold)
-- beginning with different bytes would then share them. No session gives
-- up its short names while it lives (a process may write them with plain
-- commands, compact_pieces.lua's HOLD), so such children are not merged;
-- a short piece no session names is dropped. `bucket` as for split_pairs.
local function merged_pairs(c0, c1, place, bucket)
  local bit = 2 ^ (7 - place)
  local merged = {}
  for child, key in ipairs({c0, c1}) do
    local pairs = redis.call('HGETALL', key)
    local byte = string.char(child - 1)
    local owner_of, holders = {}, {}
    if place == 7 and bucket then
      owner_of, holders = short_names(pairs)
      -- The short names each prefix held takes in the parent.
      local taken = {}
      for i = 1, #pairs, 2 do
        local field = pairs[i]
        if is_short_piece(field) and string.byte(field, 4) == 1
            and (owner_of[string.sub(field, 1, 3)] or #holders_of(field, holders) > 0) then
          local new = byte .. string.sub(field, 2, 3)
          if taken[new] then
            return nil
          end
          taken[new] = true
        end
      end
    end
    for i = 1, #pairs, 2 do
      local field, value = pairs[i], pairs[i + 1]
      if field ~= MARKER then
        if place ~= 7 then
          field = string.char(string.byte(field, 1) + (child - 1) * bit) .. string.sub(field, 2)
        elseif bucket and is_short_piece(field) then
          local prefix = string.sub(field, 1, 3)
          if owner_of[prefix] or #holders_of(field, holders) > 0 then
            field = byte .. string.sub(field, 2)
          else
            field = nil
          end
        else
          field = byte .. field
        end
        if field then
          merged[#merged + 1] = field
          merged[#merged + 1] = value
        end
      end
    end
  end
  return merged
end

-- The fields a bucket holds besides its marker.
local function fields_in(key)
  return redis.call('HLEN', key) - redis.call('HEXISTS', key, MARKER)
end

-- Refuses to write where a key already is: no script writes a bucket of
-- another shape, so one there is not the store's; but for a HASH without
-- the marker where there are marks (ARGV[8]): a mark of an earlier shape,
-- or what a plain create wrote where one was, which goes. One EXISTS for
-- all.
local function check_free(...)
  if redis.call('EXISTS', ...) == 0 then
    return
  end
  for _, key in ipairs({...}) do
    if tonumber(ARGV[8]) > 0 and redis.call('TYPE', key)['ok'] == 'hash'
        and redis.call('HEXISTS', key, MARKER) == 0 then
      redis.call('DEL', key)
    elseif redis.call('EXISTS', key) == 1 then
      error({err = 'CORRUPT a key is already where a split or merge writes a bucket: '
        .. table.concat({...}, ' or ')})
    end
  end
end

-- Leaves `key`, a bucket this script replaced and emptied, as a mark for
-- ARGV[8] seconds, where there are marks.
local function mark_moved(key)
  local secs = tonumber(ARGV[8])
  if secs > 0 then
    redis.call('HSET', key, MOVED, '1')
    redis.call('EXPIRE', key, secs)
  end
end
