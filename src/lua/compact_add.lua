-- A new session whose record is kept in its bucket (whole in its value, or
-- in pieces), in a fixed store's bucket or a growing store's: the common
-- case of compact_insert.lua on its own, with the expiry decided by the
-- caller and no helpers (every helper a script defines is created again on
-- every call). Values are as compact_common.lua describes.
-- In a growing store's bucket the route is checked first, by the bucket's
-- field count rather than compact_route.lua's HEXISTS of the marker: every
-- bucket key a growing store keeps holds its marker (a split or merge
-- writes it with the bucket's first fields and removes the buckets it
-- replaces whole, the sweeper keeps it), so a bucket with no field is one
-- split or merged away, or not claimed yet, and nothing is written. From
-- record format 11 a replaced bucket stays a while as a mark, which holds
-- a field but no marker (shape_common.lua), so the marker is read
-- ('marked'). The count also goes back with the reply, as
-- compact_grown.lua sends it, without counting again.
-- The names the pieces take next (a read), then the index entry: a
-- foreign key there fails the call before anything is written, and
-- lowering it for an id that turns out taken only brings the sweeper to
-- the bucket early. Then the value: a taken id writes nothing more, and a
-- piece a delete left behind under one of these names is overwritten
-- before anyone can read it (under short names, it makes them taken: the
-- record takes long ones, and the sweeper removes it). Where the server
-- expires fields (SERVER_EXPIRY), every field written gets the expiry as
-- its TTL and no index entry is kept.
-- In a store with a user index, the session's entry comes first
-- (src/users/mod.rs). Where the server holds every key (one node, not a
-- cluster), this script writes it (KEYS[3]), just before the session's
-- field: no revocation or sweep can read the entry before the session is
-- there, so none leaves a tombstone that a create of this id must
-- heed, and there is no grace to check. Else the caller wrote it: the
-- session is refused when it comes more than the grace after the entry,
-- by the server's clock, or when a revocation left a tombstone beside its
-- field (the field and the byte 0xc0, as compact_common.lua's TOMBSTONE),
-- as compact_insert.lua refuses it.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the group's index ZSET
-- KEYS[3], if named: the user index bucket the session's entry goes to
-- ARGV[1]: the field; ARGV[2]: the bucket's member in the index
-- ARGV[3]: the value; ARGV[4]: its expiry, unix seconds
-- ARGV[5]: 'routed' for a growing store's bucket, 'marked' for one with
--          marks (record format 11: the marker is read, not the count),
--          else ''
-- ARGV[6], ARGV[7]: with KEYS[3], the entry's field and value; else
--          when the session's index entry was written (unix seconds, by
--          the caller's estimate of the server's time) and the grace,
--          seconds, or both '' for a session no index holds
-- ARGV[8..]: the pieces, if any
-- Returns the expiry if created, 0 if the field is taken (or a tombstone
-- stands beside it), -2 if the entry was written longer than the grace
-- ago (or that far ahead); in a growing store's bucket, that reply * 2^20
-- + the bucket's field count after it (a count at most the true one plus
-- the stale pieces overwritten: the split script counts again before it
-- splits).
local expiry = tonumber(ARGV[4])
local routed = ARGV[5] == 'routed' or ARGV[5] == 'marked'
local held = 0
if routed then
  -- A mark (record format 11, shape_common.lua) holds fields but no
  -- marker.
  if ARGV[5] == 'marked' and redis.call('HEXISTS', KEYS[1], '') == 0 then
    held = 0
  else
    held = redis.call('HLEN', KEYS[1])
  end
  if held == 0 then
    return redis.error_reply('RESHAPED the bucket is not in the shape the caller routed by')
  end
end
if KEYS[3] then
  redis.call('HSET', KEYS[3], ARGV[6], ARGV[7])
elseif ARGV[6] ~= '' then
  local now = tonumber(redis.call('TIME')[1])
  local added, grace = tonumber(ARGV[6]), tonumber(ARGV[7])
  if now > added + grace or added > now + grace then
    if routed then
      return -2 * 1048576 + math.min(held, 1048575)
    end
    return -2
  end
  if redis.call('HEXISTS', KEYS[1], ARGV[1] .. '\192') == 1 then
    return math.min(held, 1048575)
  end
end
local pieces = #ARGV - 7
local value = ARGV[3]
-- What the pieces' names begin with: short where the value allows it
-- (SHORT, 64, in its count byte) and no other session's first piece is
-- under the first (compact_pieces.lua); else the session's field.
local stem = ARGV[1]
if pieces > 0 then
  local count = string.byte(value, 6)
  if count % 128 >= 64 then
    stem = string.sub(ARGV[1], 1, 1) .. string.sub(ARGV[1], -6, -5)
    if redis.call('HEXISTS', KEYS[1], stem .. '\1') == 1 then
      stem = ARGV[1]
      value = string.sub(value, 1, 5) .. string.char(count - 64) .. string.sub(value, 7)
    end
  end
end
if not SERVER_EXPIRY then
  redis.call('ZADD', KEYS[2], 'LT', expiry, ARGV[2])
end
if redis.call('HSETNX', KEYS[1], ARGV[1], value) == 0 then
  return math.min(held, 1048575)
end
local fields = {ARGV[1]}
if pieces > 0 then
  local args = {}
  for i = 1, pieces do
    fields[i + 1] = stem .. string.char(i)
    args[2 * i - 1] = fields[i + 1]
    args[2 * i] = ARGV[i + 7]
  end
  redis.call('HSET', KEYS[1], unpack(args))
end
if SERVER_EXPIRY then
  redis.call('HEXPIREAT', KEYS[1], expiry, 'FIELDS', pieces + 1, unpack(fields))
end
if routed then
  return expiry * 1048576 + math.min(held + 1 + pieces, 1048575)
end
return expiry
