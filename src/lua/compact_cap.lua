-- The session cap on one group of compact buckets: removes every session at
-- or before a cutoff in (expiry, field) order, and rescores each bucket's
-- index entry. A live session whose record is out of line is left in place
-- and returned: the caller evicts it with compact_evict.lua, which names its
-- record key, so no record outlives its entry whenever the caller stops.
-- KEYS[1]: the group's index ZSET
-- KEYS[1 + i]: the HASH of the bucket whose index member is ARGV[3 + i]
-- KEYS[#ARGV - 1..]: where the store keeps viewed items, each bucket's
--                    viewed chunks in turn (see viewed_of)
-- ARGV[1]: the cutoff expiry; ARGV[2]: the cutoff field
-- ARGV[3]: the length of a session's field (see pieces_among)
-- A bucket of another type, or holding a value in neither form, is skipped
-- and reported as compact_sweep.lua reports it.
-- Returns {expired removed, live removed, n, then n pairs of (member,
--          field) to evict out of line, then bad members...}.
local now = server_clock()
redis.call('ZCARD', KEYS[1])
local cutoff, cutoff_field, field_len = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local reply, evict, bad = {0, 0, 0}, {}, {}
for i = 4, #ARGV do
  local key, member = KEYS[i - 2], ARGV[i]
  local ok, pairs = pcall(redis.call, 'HGETALL', key)
  local corrupt, pieces = false, {}
  if ok then
    pieces = pieces_among(pairs, field_len)
    for j = 1, #pairs, 2 do
      if pieces[pairs[j]] == nil and expiry_of(pairs[j + 1]) == nil then
        corrupt = true
        break
      end
    end
  end
  if not ok then
    bad[#bad + 1] = member
  elseif corrupt then
    bad[#bad + 1] = -(tonumber(member) + 1)
  else
    local gone, gone_pieces, earliest = {}, {}, nil
    for j = 1, #pairs, 2 do
      local field, value = pairs[j], pairs[j + 1]
      local expiry = pieces[field] == nil and expiry_of(value)
      if pieces[field] == false then
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
    settle(key, member, gone, earliest, viewed_of(i - 3, #ARGV - 3, 2), gone_pieces)
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
