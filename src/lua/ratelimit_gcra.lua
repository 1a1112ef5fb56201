-- A generic cell rate algorithm limit for one client, its state one
-- integer in a shared listpack bucket: the theoretical arrival time (TAT)
-- of its next request, in microseconds by the server's clock. A request
-- is admitted unless the TAT is more than the burst tolerance ahead of
-- now; an admitted one moves the TAT on by the emission interval.
-- KEYS[1]: the bucket's HASH
-- ARGV[1]: the client; ARGV[2]: emission interval, µs (window / limit);
-- ARGV[3]: burst tolerance, µs (window - interval: a full window's
-- requests at once)
-- Returns {1, 0, now_ms} when admitted, {0, retry_after_ms, now_ms} when
-- not.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or 0)
if tat < now then
  tat = now
end
local interval, tolerance = tonumber(ARGV[2]), tonumber(ARGV[3])
local ahead = tat - now - tolerance
if ahead > 0 then
  return {0, math.ceil(ahead / 1000), math.floor(now / 1000)}
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', tat + interval))
return {1, 0, math.floor(now / 1000)}
