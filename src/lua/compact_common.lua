-- Shared by the compact layout's scripts; prepended to each. Every key a
-- script touches comes in KEYS, all under the bucket group's hash tag:
-- KEYS[1]: the bucket's HASH, field -> value
-- KEYS[2]: the group's index ZSET, bucket -> a lower bound of its earliest
--          expiry
-- KEYS[3]: the session's out-of-line record key (where given)
-- KEYS[4..]: in scripts on one session, the bucket's viewed chunks, where
--            the store keeps viewed items (src/viewed/mod.rs)
-- ARGV[1]: the field; ARGV[2]: the bucket's member in the index
-- A value holds its session's expiry. Two forms:
-- - integer: the decimal digits of identity * 10^10 + expiry, which Redis
--   keeps as one listpack integer (an identity-only session);
-- - binary: the expiry as 4 big-endian bytes, then the record, or the byte
--   OUT_OF_LINE when the record lives under KEYS[3], or PIECED, a count
--   byte and the record's first bytes, its rest in fields of the bucket
--   (compact_pieces.lua).
-- A binary value starts with the expiry's top byte, which for any expiry
-- after 2001 is no ASCII digit.

local OUT_OF_LINE = '\193'
-- A revocation that finds no session where a create may still land (a
-- store with a user index) leaves a tombstone under the field followed by
-- this byte: a field no id maps to, valued be32(until) .. TOMBSTONE, which
-- inserts check and the sweeper reclaims at `until` like any expiry.
local TOMBSTONE = '\192'

-- A rotation in a store with a user index records the new ids beside the
-- live session it copies, under the field followed by this byte, valued
-- be32(until) .. FORWARD .. the new ids (at most three), so a revocation
-- that reaches the old id finds the copies too (compact_forward.lua,
-- compact_revoke.lua); reclaimed at `until` like any expiry.
local FORWARD = '\194'

local function is_tombstone(value)
  return #value == 5 and string.sub(value, 5) == TOMBSTONE
end

-- A tombstone or a forward: no session, though it has an expiry.
local function is_marker(value)
  return is_tombstone(value) or string.sub(value, 5, 5) == FORWARD
end

local function is_integer_form(value)
  local b = string.byte(value, 1)
  return b ~= nil and b >= 48 and b <= 57
end

-- The expiry a value holds, and for a PIECED value the number of pieces
-- its record continues in and whether their names are short (as
-- pieces_in reads them); nil for a value in
-- neither form (another program wrote it), as `parse_value` in
-- src/session/layout/compact/mod.rs reads it. One read of the value's
-- first bytes: a sweep calls this on every value of the buckets it visits.
local PIECED_BYTE = string.byte(PIECED)
local function read_value(value)
  local b1 = string.byte(value, 1)
  if b1 ~= nil and b1 >= 48 and b1 <= 57 then
    -- Anchored, the pattern is tried at the first character only, not
    -- at each.
    if #value > 19 or not string.find(value, '^%d+$') then
      return nil
    end
    return tonumber(string.sub(value, -10))
  end
  if #value < 5 then
    return nil
  end
  local _, b2, b3, b4, b5, b6 = string.byte(value, 1, 6)
  local expiry = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  if b5 == PIECED_BYTE and b6 then
    return expiry, b6 % SHORT, b6 % CHECKED >= SHORT
  end
  return expiry
end

-- The expiry a value holds; nil for a value in neither form.
local function expiry_of(value)
  return (read_value(value))
end

-- The expiry of the session a script acts on. A value in neither form stops
-- the script before it writes anything, with a CORRUPT error the client
-- reports as Error::CorruptRecord; the bytes stay for inspection.
local function session_expiry(value)
  local expiry = expiry_of(value)
  if expiry == nil then
    error({err = 'CORRUPT the bucket value is in neither the integer nor the binary form'})
  end
  return expiry
end

local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
    math.floor(n / 256) % 256, n % 256)
end

-- A value for `form` ('i' integer, 'b' binary inline, 'o' out of line,
-- 'p<size>' in pieces, 'c<size>' or 's<size>' in pieces with a check) and
-- `payload` (the identity in decimal for 'i', the record's check and the
-- record for 'c<size>' and 's<size>', the record for the others); the
-- pieces' names `short` (compact_pieces.lua).
local function make_value(form, payload, expiry, short)
  local size, checked = piece_size(form)
  if size then
    return be32(expiry) .. (split_record(payload, size, checked, short))
  end
  if form == 'i' then
    if payload == '0' then
      return string.format('%d', expiry)
    end
    return payload .. string.format('%010d', expiry)
  elseif form == 'o' then
    return be32(expiry) .. OUT_OF_LINE
  end
  return be32(expiry) .. payload
end

local function with_expiry(value, expiry)
  if is_integer_form(value) then
    local head = string.sub(value, 1, -11)
    if head == '' then
      return string.format('%d', expiry)
    end
    return head .. string.format('%010d', expiry)
  end
  return be32(expiry) .. string.sub(value, 5)
end

local function is_out_of_line(value)
  return not is_integer_form(value) and string.sub(value, 5) == OUT_OF_LINE
end

-- What a stored value holds: for the integer form, the identity's decimal
-- digits and true; else the record (read from KEYS[3] when out of line,
-- '' if that key is gone; joined from its pieces, in the bucket KEYS[1]
-- under ARGV[1]) and false.
local function stored_record(value)
  if is_integer_form(value) then
    local ident = string.sub(value, 1, -11)
    if ident == '' then
      ident = '0'
    end
    return ident, true
  end
  local record = string.sub(value, 5)
  if record == OUT_OF_LINE then
    record = redis.call('GET', KEYS[3]) or ''
  end
  local n, checked, short = pieces_in(value)
  if n then
    -- The payload after PIECED and the count: the check, if any, is the
    -- client's to verify.
    local from = checked and 7 + CHECK_BYTES or 7
    record = string.sub(value, from)
    if n > 0 then
      local parts = redis.call('HMGET', KEYS[1], unpack(piece_fields(ARGV[1], n, 1, short)))
      for i = 1, n do
        if not parts[i] then
          error({err = 'CORRUPT a piece of the record is missing from its bucket'})
        end
      end
      record = record .. table.concat(parts)
    end
  end
  return record, false
end

-- Whether a stored value holds the record a caller expects: `ident` is the
-- expected identity in decimal when the expected record is identity-only
-- (else ''), `record` the expected record bytes.
local function holds(value, ident, record)
  local stored, integer = stored_record(value)
  if integer then
    return ident ~= '' and stored == ident
  end
  return stored == record
end

-- Whether a stored value's record belongs to an identity: `ident` its
-- decimal digits if it is an integer (else ''), `head` its MessagePack
-- form, which a record begins with ('' matches no one).
local function owned_by(value, ident, head)
  local stored, integer = stored_record(value)
  if integer then
    return ident ~= '' and stored == ident
  end
  return head ~= '' and string.sub(stored, 1, #head) == head
end

-- Removes a session's viewed items with it (KEYS[4..], see above). A chunk
-- key of another type is not the store's: it is left alone.
local function drop_viewed(field)
  for k = 4, #KEYS do
    pcall(redis.call, 'HDEL', KEYS[k], field)
  end
end

-- Removes the session under ARGV[1] whose value is `value`: its field,
-- its record's key or pieces, its viewed items.
local function drop_session(value)
  if is_out_of_line(value) then
    redis.call('DEL', KEYS[3])
  end
  drop_pieces(KEYS[1], ARGV[1], value)
  redis.call('HDEL', KEYS[1], ARGV[1])
  drop_viewed(ARGV[1])
end

-- The live session's value and expiry, or nil. An expired one found here
-- is reclaimed on the spot.
local function live_value(now)
  local value = redis.call('HGET', KEYS[1], ARGV[1])
  if not value then
    return nil
  end
  local expiry = session_expiry(value)
  if expiry > now then
    return value, expiry
  end
  drop_session(value)
  return nil
end

