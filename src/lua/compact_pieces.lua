-- A record too long for one listpack value, kept in pieces in its bucket
-- (included before compact_common.lua, and by compact_save.lua alone):
-- the session's value holds the expiry, PIECED, the number n of pieces
-- and the record's first bytes; the fields `field .. char(i)`, i = 1..n,
-- hold the rest in order. Such a field is one byte longer than a
-- session's, as a tombstone's or a forward record's is, and ends in a
-- byte below theirs.

local PIECED = '\195'

-- The number of pieces a PIECED value's record continues in (0 for a
-- record that only begins with the byte PIECED), or nil for a value of
-- another form.
local function pieces_in(value)
  -- An integer-form value is all digits.
  if string.sub(value, 5, 5) == PIECED and #value >= 6 then
    return string.byte(value, 6)
  end
  return nil
end

-- The fields of a session's pieces `from`..n.
local function piece_fields(field, n, from)
  local fields = {}
  for i = from or 1, n do
    fields[#fields + 1] = field .. string.char(i)
  end
  return fields
end

-- Removes the pieces of `value` from `from` on (all by default) from the
-- bucket `key`.
local function drop_pieces(key, field, value, from)
  local n = pieces_in(value) or 0
  if n >= (from or 1) then
    redis.call('HDEL', key, unpack(piece_fields(field, n, from)))
  end
end

-- A record in pieces of at most `size` bytes (form 'p<size>'): the part
-- its value holds after the expiry, PIECED and the count, and the rest,
-- as `Form::split` in src/session/layout/compact/mod.rs cuts it.
local function split_record(record, size)
  local first = size - 6
  local rest = {}
  for i = first + 1, #record, size do
    rest[#rest + 1] = string.sub(record, i, i + size - 1)
  end
  return PIECED .. string.char(#rest) .. string.sub(record, 1, first), rest
end

-- The chunk size of form 'p<size>', or nil for another form.
local function piece_size(form)
  if string.sub(form, 1, 1) == 'p' then
    return tonumber(string.sub(form, 2))
  end
  return nil
end
