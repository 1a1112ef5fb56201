-- Included by the compact scripts that sweep whole buckets.

-- Removes the fields `gone` from the bucket at `key`, and from its viewed
-- chunk keys `viewed`, and their records' pieces `pieces` from the bucket,
-- and sets its entry in the group's index (KEYS[1]) to `earliest`, the
-- earliest expiry left; nil means the bucket is empty, and its key, its
-- chunk keys and its entry go. A growing store's bucket keeps its marker
-- field '' (src/session/shape.rs), written anew in the key emptied at
-- once: without it, writes routed there would take it for a bucket split
-- away.
local function settle(key, member, gone, earliest, viewed, pieces)
  if earliest == nil then
    local marked = redis.call('HEXISTS', key, '') == 1
    redis.call('DEL', key)
    if marked then
      redis.call('HSET', key, '', '1')
    end
    for _, chunk in ipairs(viewed) do
      redis.call('DEL', chunk)
    end
    redis.call('ZREM', KEYS[1], member)
    return
  end
  for j = 1, #gone, 1000 do
    local part = {unpack(gone, j, math.min(j + 999, #gone))}
    redis.call('HDEL', key, unpack(part))
    for _, chunk in ipairs(viewed) do
      -- A chunk key of another type is not the store's: left alone.
      pcall(redis.call, 'HDEL', chunk, unpack(part))
    end
  end
  for j = 1, #pieces, 1000 do
    redis.call('HDEL', key, unpack(pieces, j, math.min(j + 999, #pieces)))
  end
  redis.call('ZADD', KEYS[1], earliest, member)
end

-- The pieces among a bucket's HGETALL reply `pairs`, as a set of fields:
-- those its values name, and holds of its sessions' short names (true),
-- which go with their sessions, and those none names (false), left by a
-- delete that raced a write adding pieces, which go now. `field_len` is the length of a session's field; a piece's
-- is one more, or four where its name is short, ending in a byte 1..15.
local function pieces_among(pairs, field_len)
  local pieces = {}
  for j = 1, #pairs, 2 do
    local n, _, short = pieces_in(pairs[j + 1])
    if n and n > 0 then
      for _, name in ipairs(piece_fields(pairs[j], n, 1, short)) do
        pieces[name] = true
      end
    end
  end
  -- The short prefixes of the bucket's sessions, made only where a first
  -- short piece no value names may be one's hold (compact_pieces.lua's
  -- HOLD), which stays, as a named piece does, while its session lives.
  local prefixes
  for j = 1, #pairs, 2 do
    local field = pairs[j]
    local len = #field
    if (len == field_len + 1 or len == 4) and pieces[field] == nil
        and string.byte(field, -1) <= 15 then
      local held = false
      if len == 4 and string.byte(field, 4) == 1 then
        if not prefixes then
          prefixes = {}
          for k = 1, #pairs, 2 do
            if #pairs[k] == field_len then
              prefixes[short_prefix(pairs[k])] = true
            end
          end
        end
        held = prefixes[string.sub(field, 1, 3)] == true
      end
      pieces[field] = held
    end
  end
  return pieces
end

-- Adds the fields of the pieces of `value`, stored under `field`, to
-- `list`.
local function add_pieces(list, field, value)
  local n, _, short = pieces_in(value)
  if n and n > 0 then
    for _, name in ipairs(piece_fields(field, n, 1, short)) do
      list[#list + 1] = name
    end
  end
end

-- The viewed chunk keys of the i-th of n buckets (src/viewed/mod.rs): a
-- group script names them after all n bucket keys, the first of which is
-- KEYS[first], bucket by bucket; none where the store keeps no viewed items.
local function viewed_of(i, n, first)
  local per = (#KEYS - first + 1 - n) / n
  local from = first + n + (i - 1) * per
  local keys = {}
  for k = from, from + per - 1 do
    keys[#keys + 1] = KEYS[k]
  end
  return keys
end

