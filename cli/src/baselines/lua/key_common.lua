-- Included by the key-per-session scripts that set an expiry, after
-- server_clock.lua.
-- KEYS[1]: the session's own key, which carries the session's expiry.

-- The expiry for a lifetime of `ttl` seconds from now, rounded up so that a
-- session lives at least `ttl` seconds (and less than `ttl` + 1).
local function expiry_in(ttl)
  local _, from = server_clock()
  return from + tonumber(ttl)
end

-- The expiry an insert asks for: ARGV[mode] is 'in' (seconds from now) or
-- 'at' (unix seconds). Returns nil if an 'at' expiry has passed.
local function requested_expiry(mode, secs)
  if mode == 'in' then
    return expiry_in(secs)
  end
  local at = tonumber(secs)
  if at <= server_now() then
    return nil
  end
  return at
end
