-- A record too long for one listpack value, kept in pieces in its bucket
-- (included before compact_common.lua, and by compact_save.lua alone):
-- the session's value holds the expiry, PIECED, a count byte and the
-- payload's first bytes; n fields hold the rest in order, n the count
-- byte's low four bits. The payload is the record, or, where the count
-- byte has CHECKED added (record format 5 on), the record's check
-- (CHECK_BYTES, which only clients compute and verify) and the record.
-- Piece i's field is named one of two ways:
-- - long: the session's field and the byte i, one byte longer than a
--   session's field (as a tombstone's or a forward record's is, ending in
--   a byte below theirs), and no other session's;
-- - short (SHORT added to the count byte, record format 7 on): the
--   field's first byte, the two bytes before its last four, and the byte
--   i, four bytes in all. The first byte is the one a split or merge
--   below a byte's last bit rewrites, so these move with their session;
--   the other two are random in every id, stamped or not (a stamp is an
--   id's last four bytes). Another session of the bucket may share them:
--   a writer takes short names only where no other session's first
--   piece holds the first (short_is_free), so one session at most owns
--   them, and the others keep long names.

local PIECED = '\195'
local CHECKED = 128
local SHORT = 64
local CHECK_BYTES = 4

-- The number of pieces a PIECED value's record continues in (0 for a
-- record that only begins with the byte PIECED), whether its payload
-- begins with a check, and whether its pieces have short names; nil for
-- a value of another form.
local function pieces_in(value)
  -- An integer-form value is all digits.
  if string.sub(value, 5, 5) == PIECED and #value >= 6 then
    local count = string.byte(value, 6)
    return count % SHORT, count >= CHECKED, count % CHECKED >= SHORT
  end
  return nil
end

-- What a session's short piece names begin with.
local function short_prefix(field)
  return string.sub(field, 1, 1) .. string.sub(field, -6, -5)
end

-- The fields of a session's pieces `from`..n, short or long.
local function piece_fields(field, n, from, short)
  local stem = short and short_prefix(field) or field
  local fields = {}
  for i = from or 1, n do
    fields[#fields + 1] = stem .. string.char(i)
  end
  return fields
end

-- Removes the pieces of `value` from `from` on (all by default) from the
-- bucket `key`.
local function drop_pieces(key, field, value, from)
  local n, _, short = pieces_in(value)
  if n and n >= (from or 1) then
    redis.call('HDEL', key, unpack(piece_fields(field, n, from, short)))
  end
end

-- What a live session that gives up its short piece names (its record
-- shrinks to one value, or takes long names or goes out of line) leaves
-- under the first of them: a hold, so that no other session takes them
-- while this one lives. From record format 10 a process may write a
-- session it read moments before with plain commands that name its
-- pieces as it read them (src/session/layout/compact/plain.rs); a hold
-- makes those names its own still, or no one's. The sweeper and the cap
-- keep a first short piece while a session of the bucket has its prefix,
-- a split or merge moves it with that session, and a merge that would
-- give two sessions one prefix is not made (shape_common.lua).
local HOLD = '\192'

-- Removes the pieces of `old`, a live session's value, that the record
-- written now (`count` pieces, named `short` or long) does not reuse:
-- beyond the new ones where named alike, else all, but where short names
-- are given up, the first becomes a hold (HOLD above) if `hold` (not in a
-- store whose fields the server expires, which no plain write reaches).
local function replace_pieces(key, field, old, count, short, hold)
  local n, _, was_short = pieces_in(old)
  if not n or n == 0 then
    return
  end
  if was_short == short then
    drop_pieces(key, field, old, count + 1)
  elseif was_short and hold then
    drop_pieces(key, field, old, 2)
    redis.call('HSET', key, short_prefix(field) .. '\1', HOLD)
  else
    drop_pieces(key, field, old, 1)
  end
end

-- Whether the pieces of a record written now under `field` of bucket
-- `key` may take short names: the value it replaces (`old`, or nil) has
-- pieces under them, which are its own, or no session's first piece is
-- under the first of them.
local function short_is_free(key, field, old)
  if old then
    local n, _, short = pieces_in(old)
    if short and n > 0 then
      return true
    end
  end
  return redis.call('HEXISTS', key, short_prefix(field) .. '\1') == 0
end

-- A PIECED `value` with its count byte's SHORT set as `short` says.
local function with_names(value, short)
  local count = string.byte(value, 6)
  if (count % CHECKED >= SHORT) == short then
    return value
  end
  return string.sub(value, 1, 5) .. string.char(short and count + SHORT or count - SHORT)
    .. string.sub(value, 7)
end

-- A payload in pieces of at most `size` bytes (form 'p<size>', or
-- 'c<size>' or 's<size>' for a `checked` one), their names `short` or
-- long: the part its value holds after the expiry, PIECED and the count,
-- and the rest, as `split` in src/session/layout/compact/value.rs cuts it.
local function split_record(payload, size, checked, short)
  local first = size - 6
  local rest = {}
  for i = first + 1, #payload, size do
    rest[#rest + 1] = string.sub(payload, i, i + size - 1)
  end
  local count = #rest + (checked and CHECKED or 0) + (short and #rest > 0 and SHORT or 0)
  return PIECED .. string.char(count) .. string.sub(payload, 1, first), rest
end

-- The chunk size of form 'p<size>', 'c<size>' or 's<size>', whether the
-- form's payload begins with a check ('c', 's'), and whether its pieces
-- may take short names ('s': where short_is_free); nil for another form.
local function piece_size(form)
  local kind = string.sub(form, 1, 1)
  if kind == 'p' or kind == 'c' or kind == 's' then
    return tonumber(string.sub(form, 2)), kind ~= 'p', kind == 's'
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
