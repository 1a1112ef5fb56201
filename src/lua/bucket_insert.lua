-- Inserts a new session into its bucket.
-- KEYS[1..2], ARGV[1]: see bucket_common.lua; KEYS[3] is given only with
-- ARGV[3] = '0'
-- ARGV[2]: record bytes
-- ARGV[3]: '1' to keep the record in the bucket, '0' to store it out of line
-- ARGV[4]: 'in' (ARGV[5] is seconds from now) or 'at' (ARGV[5] is unix seconds)
-- ARGV[5]: seconds
-- Returns the expiry; 0 if the field is taken (live or not yet swept); -1 if
-- an 'at' expiry has passed.
local now, from = server_clock()
local expiry = tonumber(ARGV[5])
if ARGV[4] == 'in' then
  expiry = from + expiry
elseif expiry <= now then
  return -1
end
local stored = ARGV[2]
if ARGV[3] ~= '1' then
  stored = OUT_OF_LINE
end
-- HSETNX checks the HASH's type before anything is written.
if redis.call('HSETNX', KEYS[1], ARGV[1], stored) == 0 then
  return 0
end
-- A foreign ZSET under our name: take the field back out and report.
local ok, err = pcall(redis.call, 'ZADD', KEYS[2], expiry, ARGV[1])
if not ok then
  redis.call('HDEL', KEYS[1], ARGV[1])
  if type(err) == 'table' then
    return err
  end
  return redis.error_reply(err)
end
if ARGV[3] ~= '1' then
  redis.call('SET', KEYS[3], ARGV[2], 'EXAT', expiry)
end
return expiry
