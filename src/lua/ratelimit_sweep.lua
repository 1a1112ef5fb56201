-- Removes the clients of GCRA buckets whose state has lapsed (a TAT in
-- the past is the same as none), and buckets left empty.
-- KEYS: the buckets' HASHes
-- Returns the number of clients removed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local removed = 0
for i = 1, #KEYS do
  local ok, pairs = pcall(redis.call, 'HGETALL', KEYS[i])
  if ok then
    for j = 1, #pairs, 2 do
      if (tonumber(pairs[j + 1]) or 0) <= now then
        redis.call('HDEL', KEYS[i], pairs[j])
        removed = removed + 1
      end
    end
  end
end
return removed
