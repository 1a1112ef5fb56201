-- Removes a bucket's expired sessions (or, for the session cap, every
-- session expiring at or before a cutoff), at most ARGV[1] in one step.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the bucket's ZSET
-- ARGV[1]: most entries to remove in this step
-- ARGV[2]: cutoff in unix seconds, or '' for now (expiry only)
-- Out-of-line records carry the session's expiry as EXAT on their own key,
-- so Redis reclaims them when they expire; sessions evicted before their
-- expiry have their fields returned so the caller deletes those keys.
-- Returns {removed, oldest removed expiry or -1, next expiry or -1,
--          1 if expired entries are left else 0, out-of-line fields...}.
local now = tonumber(redis.call('TIME')[1])
local cutoff = now
if ARGV[2] ~= '' then
  cutoff = math.max(now, tonumber(ARGV[2]))
end
-- Live while now < expiry, so expired means score <= now.
local found = redis.call('ZRANGE', KEYS[2], '-inf', cutoff, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]), 'WITHSCORES')
local fields = {}
local oldest = -1
for i = 1, #found, 2 do
  fields[#fields + 1] = found[i]
end
if #found > 0 then
  oldest = tonumber(found[2])
end
local reply = {#fields, oldest, -1, 0}
if #fields > 0 then
  if cutoff > now then
    local values = redis.call('HMGET', KEYS[1], unpack(fields))
    for i = 1, #fields do
      if values[i] == '\193' then
        reply[#reply + 1] = fields[i]
      end
    end
  end
  redis.call('HDEL', KEYS[1], unpack(fields))
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
