-- Shared by the bucket and compact scripts that read the server's clock.

-- The server's clock: whole seconds (a session is live while now <
-- expiry), and the same rounded up, from which lifetimes are counted so a
-- session lives at least its TTL (and less than TTL + 1 second).
local function server_clock()
  local t = redis.call('TIME')
  local now = tonumber(t[1])
  if t[2] ~= '0' then
    return now, now + 1
  end
  return now, now
end

local function server_now()
  return (server_clock())
end

