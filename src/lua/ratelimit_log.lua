-- The talk's exact sliding window with Retry-After, for one client, with
-- its caveats fixed: the server's clock, not the caller's; members that
-- never collide (two requests in one millisecond are two requests); keys
-- that expire when the client goes quiet; and a retry set of at most
-- ARGV[1] slots (the talk's grows without bound under a flood).
-- KEYS[1]: the client's log ZSET; KEYS[2]: its retry ZSET (one hash tag)
-- ARGV[1]: requests allowed per window; ARGV[2]: the window, ms
-- Returns {1, 0, now} when admitted, {0, retry_after_ms, now} when not.
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
if held < limit then
  redis.call('ZADD', KEYS[1], now, t[1] .. t[2] .. ':' .. held)
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, 0, now}
end
local interval = window / limit
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local slot = now + interval
if #last > 0 then
  slot = tonumber(last[2]) + interval
end
if redis.call('ZCARD', KEYS[2]) < limit then
  redis.call('ZADD', KEYS[2], slot, slot)
  redis.call('PEXPIRE', KEYS[2], math.ceil(slot - now) + 1)
elseif #last > 0 then
  -- Full: the last slot handed out is the advice.
  slot = tonumber(last[2])
end
return {0, math.ceil(slot - now), now}
