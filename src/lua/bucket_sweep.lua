-- Removes a bucket's expired sessions (or, for the session cap, every
-- session expiring at or before a cutoff), at most ARGV[1] in one step.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the bucket's ZSET
-- ARGV[1]: most entries to remove in this step
-- ARGV[2]: cutoff in unix seconds, or '' for now (expiry only)
-- Out-of-line records carry the session's expiry as EXAT on their own key,
-- so Redis reclaims them when they expire; sessions evicted before their
-- expiry have their fields returned so the caller deletes those keys.
-- Returns {removed, oldest removed expiry or -1, next expiry or -1,
--          1 if entries to remove are left else 0, out-of-line fields...}.
local now = tonumber(redis.call('TIME')[1])
local cutoff = now
if ARGV[2] ~= '' then
  cutoff = math.max(now, tonumber(ARGV[2]))
end
local limit = tonumber(ARGV[1])
local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if not oldest[2] or tonumber(oldest[2]) > cutoff then
  return {0, -1, tonumber(oldest[2] or -1), 0}
end
oldest = tonumber(oldest[2])
local card = redis.call('ZCARD', KEYS[2])
local newest = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
if newest <= cutoff and card <= limit and cutoff == now then
  -- Every entry has expired: drop both keys rather than empty two
  -- listpacks one field at a time.
  redis.call('DEL', KEYS[1], KEYS[2])
  return {card, oldest, -1, 0}
end
-- Live while now < expiry, so expired means score <= now.
local fields = redis.call('ZRANGE', KEYS[2], '-inf', cutoff, 'BYSCORE', 'LIMIT', 0, limit)
local reply = {#fields, oldest, -1, 0}
if cutoff > now then
  local values = redis.call('HMGET', KEYS[1], unpack(fields))
  for i = 1, #fields do
    if values[i] == '\193' then
      reply[#reply + 1] = fields[i]
    end
  end
end
if #fields == card then
  redis.call('DEL', KEYS[1], KEYS[2])
  return reply
end
redis.call('HDEL', KEYS[1], unpack(fields))
if #fields < limit then
  -- All entries up to the cutoff were found: remove them as one range.
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', cutoff)
else
  redis.call('ZREM', KEYS[2], unpack(fields))
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if first[2] then
  reply[3] = tonumber(first[2])
  if reply[3] <= cutoff then
    reply[4] = 1
  end
end
return reply
