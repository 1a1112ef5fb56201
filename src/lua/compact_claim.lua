-- Gives a bucket of a growing store's current shape its marker
-- (compact_route.lua): a group's first buckets have none until a write
-- comes, nor does one the sweeper emptied and removed.
-- KEYS[1]: the group's shape HASH; KEYS[2]: the bucket
-- ARGV[1]: the shape's epoch the caller routed by
-- Returns the shape's epoch; the marker is written only when that is
-- ARGV[1], the bucket then being a leaf of the current shape.
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
if epoch == tonumber(ARGV[1]) then
  redis.call('HSETNX', KEYS[2], '', '1')
end
return epoch
