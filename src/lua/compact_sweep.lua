-- Sweeps buckets of one group: removes their expired sessions and sets each
-- bucket's index entry to its true earliest expiry (adding one that was
-- lost, removing the entry and the key of a bucket left empty).
-- KEYS[1]: the group's index ZSET
-- KEYS[1 + i]: the HASH of the bucket whose index member is ARGV[1 + i]
-- KEYS[2 + n..]: where the store keeps viewed items, each bucket's viewed
--                chunks in turn (see viewed_of)
-- ARGV[1]: n, the number of buckets
-- ARGV[1 + n + i]: the length of a session's field in bucket i (a
--                  piece's is one more, or four where its name is short,
--                  and ends in a byte 1..15: compact_pieces.lua)
-- A first short piece no live record names stays while a live session has
-- its prefix (a hold: compact_pieces.lua).
-- A growing store's buckets hold a marker field '' (src/session/shape.rs),
-- which is no session: a bucket left with only its marker keeps its key,
-- and merges fold it into its sibling. A key a split or merge replaced
-- stays a while as a mark, holding the field '\255' (record format 11,
-- shape_common.lua): an entry naming one is removed, the mark left to
-- its own expiry.
-- Out-of-line records carry their session's expiry as EXAT on their own key,
-- so Redis reclaims an expired one itself.
-- A bucket key of another type, or a bucket holding a value in neither form
-- (another program wrote it), is skipped, changed in nothing, and reported:
-- its member for the first, -(member + 1) for the second.
-- Returns {expired removed, oldest removed expiry or -1, buckets visited,
--          bad members...}.
local now = server_clock()
-- The index's type is checked before anything is written.
redis.call('ZCARD', KEYS[1])
local reply = {0, -1, 0}
local n = tonumber(ARGV[1])
for i = 1, n do
  local key, member = KEYS[i + 1], ARGV[i + 1]
  local field_len = tonumber(ARGV[1 + n + i])
  local ok, pairs = pcall(redis.call, 'HGETALL', key)
  if not ok then
    reply[#reply + 1] = member
  else
    local gone, gone_pieces, earliest, oldest, corrupt = {}, {}, nil, nil, false
    -- One pass over the bucket: piece fields are gathered, and each live
    -- session's count of pieces noted under what its pieces' names begin
    -- with. Only a bucket keeping live sessions sorts its pieces out after
    -- the pass (those of no live session's record go); an emptied one's
    -- key goes whole.
    local loose, live_pieces, live = {}, {}, {}
    local mark = false
    for j = 1, #pairs, 2 do
      local field, value = pairs[j], pairs[j + 1]
      local len = #field
      if len == 1 and field == '\255' then
        mark = true
        break
      elseif (len == field_len + 1 or len == 4) and string.byte(field, len) <= 15 then
        loose[#loose + 1] = field
      elseif len > 0 then
        -- (The marker '' of a growing store's bucket is no session.)
        local expiry, count, short = read_value(value)
        if expiry == nil then
          corrupt = true
          break
        end
        if expiry <= now then
          gone[#gone + 1] = field
          if oldest == nil or expiry < oldest then
            oldest = expiry
          end
        else
          live[#live + 1] = field
          if count and count > 0 then
            live_pieces[short and short_prefix(field) or field] = count
          end
          if earliest == nil or expiry < earliest then
            earliest = expiry
          end
        end
      end
    end
    if earliest ~= nil then
      -- The short prefixes of the live sessions, made only where a first
      -- short piece that no live record names may be one's hold
      -- (compact_pieces.lua's HOLD): it stays while a session of its
      -- prefix lives.
      local prefixes
      for _, field in ipairs(loose) do
        local count = live_pieces[string.sub(field, 1, -2)]
        if count == nil or string.byte(field, -1) > count then
          local held = false
          if count == nil and #field == 4 and string.byte(field, 4) == 1 then
            if not prefixes then
              prefixes = {}
              for _, owner in ipairs(live) do
                prefixes[short_prefix(owner)] = true
              end
            end
            held = prefixes[string.sub(field, 1, 3)] == true
          end
          if not held then
            gone_pieces[#gone_pieces + 1] = field
          end
        end
      end
    end
    if mark then
      redis.call('ZREM', KEYS[1], member)
    elseif corrupt then
      reply[#reply + 1] = -(tonumber(member) + 1)
    else
      reply[3] = reply[3] + 1
      reply[1] = reply[1] + #gone
      if oldest and (reply[2] == -1 or oldest < reply[2]) then
        reply[2] = oldest
      end
      settle(key, member, gone, earliest, viewed_of(i, n, 2), gone_pieces)
    end
  end
end
return reply
