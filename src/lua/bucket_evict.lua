-- Evicts sessions whose records live out of line, for the session cap: each
-- record key goes with its bucket entry in one step.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the bucket's ZSET
-- KEYS[2 + i]: the out-of-line record key of ARGV[2 + i]
-- ARGV[1]: the cap's cutoff expiry; ARGV[2]: the cap's cutoff field
-- ARGV[3..]: the fields to evict
-- An entry touched since the sweep step chose it (now past the cutoff) or
-- already gone is left alone.
-- Returns the number evicted.
local OUT_OF_LINE = '\193'
local cutoff, cutoff_field = tonumber(ARGV[1]), ARGV[2]
local evicted = 0
for i = 3, #ARGV do
  local field = ARGV[i]
  local expiry = redis.call('ZSCORE', KEYS[2], field)
  if expiry and within_cutoff(tonumber(expiry), field, cutoff, cutoff_field) then
    if redis.call('HGET', KEYS[1], field) == OUT_OF_LINE then
      redis.call('DEL', KEYS[i])
    end
    redis.call('HDEL', KEYS[1], field)
    redis.call('ZREM', KEYS[2], field)
    evicted = evicted + 1
  end
end
return evicted
