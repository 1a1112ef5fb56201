-- Included by the compact scripts that write a field, after the line that
-- sets SERVER_EXPIRY (src/scripts.rs builds each such script twice).
-- With SERVER_EXPIRY the server expires fields itself (Redis 7.4+): each
-- field written carries its expiry as a field TTL as well (an HSET clears
-- one), and so do its viewed chunk fields; the group index, which only the
-- sweeper reads, is not kept. Without it, the bucket's index entry is
-- lowered to each expiry written, for the sweeper.

local function expire_field(key, field, expiry)
  if SERVER_EXPIRY then
    redis.call('HEXPIREAT', key, expiry, 'FIELDS', 1, field)
  end
end

-- The session's viewed chunk fields (KEYS[first..]) expire with it. A chunk
-- key of another type is not the store's: left alone.
local function expire_viewed(first, field, expiry)
  if SERVER_EXPIRY then
    for k = first, #KEYS do
      pcall(redis.call, 'HEXPIREAT', KEYS[k], expiry, 'FIELDS', 1, field)
    end
  end
end

-- A session's pieces `1..n`, named `short` or long, expire with it.
local function expire_pieces(key, field, n, expiry, short)
  if SERVER_EXPIRY and n > 0 then
    redis.call('HEXPIREAT', key, expiry, 'FIELDS', n, unpack(piece_fields(field, n, 1, short)))
  end
end

-- Whether the pieces of a record of `form` and `payload` written under
-- `field` in bucket `key` take short names (compact_pieces.lua): where it
-- has pieces, its form allows them and short_is_free, given `old`, the
-- value it replaces (or nil).
local function short_names(key, field, form, payload, old)
  local size, _, short = piece_size(form)
  return (short and #payload > size - 6 and short_is_free(key, field, old)) == true
end

-- Writes the pieces of a record of `form` for `field` (none for a record
-- in one value), named `short` or long, each with the session's expiry
-- where the server expires fields, and removes those `old` left: beyond
-- the new ones where named alike, else all.
local function write_pieces(key, field, form, payload, expiry, old, short)
  local size, checked = piece_size(form)
  local rest = {}
  if size then
    local _
    _, rest = split_record(payload, size, checked, short)
  end
  local count = #rest
  if old then
    replace_pieces(key, field, old, count, short, not SERVER_EXPIRY)
  end
  if count > 0 then
    local args = {}
    local names = piece_fields(field, count, 1, short)
    for i, part in ipairs(rest) do
      args[#args + 1] = names[i]
      args[#args + 1] = part
    end
    redis.call('HSET', key, unpack(args))
    expire_pieces(key, field, count, expiry, short)
  end
end

local function lower_index(expiry, member)
  if not SERVER_EXPIRY then
    redis.call('ZADD', KEYS[2], 'LT', expiry, member)
  end
end
