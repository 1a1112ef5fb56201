-- A record too long for one listpack value, kept in pieces in its bucket
-- (included before compact_common.lua, and by compact_save.lua alone):
-- the session's value holds the expiry, PIECED, the number n of pieces
-- and the payload's first bytes; the fields `field .. char(i)`, i = 1..n,
-- hold the rest in order. Such a field is one byte longer than a
-- session's, as a tombstone's or a forward record's is, and ends in a
-- byte below theirs. The payload is the record, or, where the count
-- byte has CHECKED added (record format 5 on), the record's check
-- (CHECK_BYTES, which only clients compute and verify) and the record.

local PIECED = '\195'
local CHECKED = 128
local CHECK_BYTES = 4

-- The number of pieces a PIECED value's record continues in (0 for a
-- record that only begins with the byte PIECED), and whether its payload
-- begins with a check; nil for a value of another form.
local function pieces_in(value)
  -- An integer-form value is all digits.
  if string.sub(value, 5, 5) == PIECED and #value >= 6 then
    local count = string.byte(value, 6)
    if count >= CHECKED then
      return count - CHECKED, true
    end
    return count, false
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

-- A payload in pieces of at most `size` bytes (form 'p<size>', or
-- 'c<size>' for a `checked` one): the part its value holds after the
-- expiry, PIECED and the count, and the rest, as `split` in
-- src/session/layout/compact/mod.rs cuts it.
local function split_record(payload, size, checked)
  local first = size - 6
  local rest = {}
  for i = first + 1, #payload, size do
    rest[#rest + 1] = string.sub(payload, i, i + size - 1)
  end
  local count = #rest + (checked and CHECKED or 0)
  return PIECED .. string.char(count) .. string.sub(payload, 1, first), rest
end

-- The chunk size of form 'p<size>' or 'c<size>' and whether the form's
-- payload begins with a check, or nil for another form.
local function piece_size(form)
  local kind = string.sub(form, 1, 1)
  if kind == 'p' or kind == 'c' then
    return tonumber(string.sub(form, 2)), kind == 'c'
  end
  return nil
end

-- The record a payload of `form` holds: a checked one's follows its check.
local function payload_record(form, payload)
  local _, checked = piece_size(form)
  if checked then
    return string.sub(payload, CHECK_BYTES + 1)
  end
  return payload
end
