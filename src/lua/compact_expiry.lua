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

-- A session's pieces `1..n` expire with it.
local function expire_pieces(key, field, n, expiry)
  if SERVER_EXPIRY and n > 0 then
    redis.call('HEXPIREAT', key, expiry, 'FIELDS', n, unpack(piece_fields(field, n)))
  end
end

-- Writes the pieces of a record of `form` for `field` (none for a record
-- in one value), each with the session's expiry where the server expires
-- fields, and removes those a longer record `old` left beyond them.
local function write_pieces(key, field, form, payload, expiry, old)
  local size, checked = piece_size(form)
  local rest = {}
  if size then
    local _
    _, rest = split_record(payload, size, checked)
  end
  local count = #rest
  if count > 0 then
    local args = {}
    for i, part in ipairs(rest) do
      args[#args + 1] = field .. string.char(i)
      args[#args + 1] = part
    end
    redis.call('HSET', key, unpack(args))
    expire_pieces(key, field, count, expiry)
  end
  if old then
    drop_pieces(key, field, old, count + 1)
  end
end

local function lower_index(expiry, member)
  if not SERVER_EXPIRY then
    redis.call('ZADD', KEYS[2], 'LT', expiry, member)
  end
end
