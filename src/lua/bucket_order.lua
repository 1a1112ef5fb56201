-- Shared by the sweep scripts. Entries of a ZSET are ordered by score, then
-- by member bytes; the session cap's cutoff is a point in that order, so
-- sessions sharing one expiry second are split at a field rather than all
-- evicted or all kept.

-- Whether field a sorts at or before field b, byte by byte (as the ZSET
-- orders members; Lua's own comparison follows the server's locale).
local function field_le(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a <= #b
end

-- Whether an entry (expiry, field) lies at or before the cap's cutoff.
local function within_cutoff(expiry, field, cutoff, cutoff_field)
  return expiry < cutoff or (expiry == cutoff and field_le(field, cutoff_field))
end

-- Calls a command with many arguments in slices Lua's stack can hold.
local function call_in_slices(command, key, args)
  for i = 1, #args, 1000 do
    redis.call(command, key, unpack(args, i, math.min(i + 999, #args)))
  end
end

