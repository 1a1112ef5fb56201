-- The session cap on compact buckets that share an index: removes every
-- session at or before a cutoff in (expiry, field) order, and rescores each
-- bucket's index entry. A live session whose record is out of line is left
-- in place and returned: the caller evicts it with compact_evict.lua, which
-- names its record key, so no record outlives its entry whenever the
-- caller stops.
-- KEYS[1]: the buckets' index ZSET (a group's; a growing store's band's)
-- KEYS[1 + i]: the HASH of the i-th of n buckets
-- KEYS[2 + n..]: where the store keeps viewed items, each bucket's viewed
--                chunks in turn (see viewed_of)
-- ARGV[1]: the cutoff expiry
-- ARGV[3i - 1], ARGV[3i], ARGV[3i + 1]: the i-th bucket's member in the
--          index, the length of a session's field there (see
--          pieces_among), and the cutoff's field as that bucket orders its
--          fields (a growing store's buckets have fields of several lengths:
--          src/session/sweep/compact.rs)
-- A growing store's bucket holds a marker field '' (src/session/shape.rs),
-- which is no session and stays. A key a split or merge replaced stays a
-- while as a mark (the field '\255', record format 11, shape_common.lua):
-- an entry naming one is removed, the mark left to its own expiry.
-- A bucket of another type, or holding a value in neither form, is skipped
-- and reported as compact_sweep.lua reports it.
-- Returns {expired removed, live removed, m, then m pairs of (member,
--          field) to evict out of line, then bad members...}.
local now = server_clock()
redis.call('ZCARD', KEYS[1])
local cutoff = tonumber(ARGV[1])
local n = (#ARGV - 1) / 3
local reply, evict, bad = {0, 0, 0}, {}, {}
for i = 1, n do
  local key, member = KEYS[1 + i], ARGV[3 * i - 1]
  local field_len, cutoff_field = tonumber(ARGV[3 * i]), ARGV[3 * i + 1]
  local ok, pairs = pcall(redis.call, 'HGETALL', key)
  local corrupt, pieces, mark = false, {}, false
  if ok then
    for j = 1, #pairs, 2 do
      mark = mark or pairs[j] == '\255'
    end
  end
  if mark then
    redis.call('ZREM', KEYS[1], member)
  elseif ok then
    pieces = pieces_among(pairs, field_len)
    for j = 1, #pairs, 2 do
      if pairs[j] ~= '' and pieces[pairs[j]] == nil and expiry_of(pairs[j + 1]) == nil then
        corrupt = true
        break
      end
    end
  end
  if mark then
    -- Nothing of a session's.
  elseif not ok then
    bad[#bad + 1] = member
  elseif corrupt then
    bad[#bad + 1] = -(tonumber(member) + 1)
  else
    local gone, gone_pieces, earliest = {}, {}, nil
    for j = 1, #pairs, 2 do
      local field, value = pairs[j], pairs[j + 1]
      local expiry = pieces[field] == nil and field ~= '' and expiry_of(value)
      if field == '' then
        -- The marker.
      elseif pieces[field] == false then
        gone_pieces[#gone_pieces + 1] = field
      elseif not expiry then
        -- A piece of a record: it goes with its session.
      elseif expiry <= now then
        gone[#gone + 1] = field
        add_pieces(gone_pieces, field, value)
        reply[1] = reply[1] + 1
      elseif is_marker(value) then
        -- Not a session: it blocks a create, or names a rotation's copies
        -- for a revocation, until it expires.
        if earliest == nil or expiry < earliest then
          earliest = expiry
        end
      elseif within_cutoff(expiry, field, cutoff, cutoff_field) then
        if is_out_of_line(value) then
          evict[#evict + 1] = member
          evict[#evict + 1] = field
          if earliest == nil or expiry < earliest then
            earliest = expiry
          end
        else
          gone[#gone + 1] = field
          add_pieces(gone_pieces, field, value)
          reply[2] = reply[2] + 1
        end
      elseif earliest == nil or expiry < earliest then
        earliest = expiry
      end
    end
    settle(key, member, gone, earliest, viewed_of(i, n, 2), gone_pieces)
  end
end
reply[3] = #evict / 2
for i = 1, #evict do
  reply[#reply + 1] = evict[i]
end
for i = 1, #bad do
  reply[#reply + 1] = bad[i]
end
return reply
