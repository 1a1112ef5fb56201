-- Evicts sessions whose records live out of line, for the session cap: each
-- record key goes with its field in one step.
-- KEYS[1]: the bucket's HASH
-- KEYS[1 + i]: the out-of-line record key of ARGV[2 + i]
-- KEYS[#ARGV..]: the bucket's viewed chunks, where the store keeps them
-- ARGV[1]: the cap's cutoff expiry; ARGV[2]: the cap's cutoff field
-- ARGV[3..]: the fields to evict
-- A session touched since the cap step chose it (now past the cutoff) or
-- already gone is left alone.
-- Returns the number evicted.
local cutoff, cutoff_field = tonumber(ARGV[1]), ARGV[2]
local evicted = 0
for i = 3, #ARGV do
  local field = ARGV[i]
  local value = redis.call('HGET', KEYS[1], field)
  local expiry = value and expiry_of(value)
  if expiry and within_cutoff(expiry, field, cutoff, cutoff_field) then
    if is_out_of_line(value) then
      redis.call('DEL', KEYS[i - 1])
    end
    drop_pieces(KEYS[1], field, value)
    redis.call('HDEL', KEYS[1], field)
    for k = #ARGV, #KEYS do
      pcall(redis.call, 'HDEL', KEYS[k], field)
    end
    evicted = evicted + 1
  end
end
return evicted
