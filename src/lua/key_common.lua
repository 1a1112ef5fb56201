-- Included by the key-per-session scripts that set an expiry.
-- KEYS[1]: the session's own key, which carries the session's expiry.

-- The expiry for a lifetime of `ttl` seconds from now, rounded up so that a
-- session lives at least `ttl` seconds (and less than `ttl` + 1).
local function expiry_in(ttl)
  local t = redis.call('TIME')
  local now = tonumber(t[1])
  if t[2] ~= '0' then
    now = now + 1
  end
  return now + tonumber(ttl)
end

-- The expiry an insert asks for: ARGV[mode] is 'in' (seconds from now) or
-- 'at' (unix seconds). Returns nil if an 'at' expiry has passed.
local function requested_expiry(mode, secs)
  if mode == 'in' then
    return expiry_in(secs)
  end
  local at = tonumber(secs)
  if at <= tonumber(redis.call('TIME')[1]) then
    return nil
  end
  return at
end

