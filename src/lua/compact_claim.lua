-- Gives a bucket of a growing store's current shape its marker
-- (compact_route.lua): a group's first bucket has none until a write
-- comes (splits and merges mark the buckets they make, and the sweeper
-- keeps a marked bucket it empties).
-- KEYS[1]: the group's shape HASH; KEYS[2]: the bucket
-- ARGV[1]: the epoch of the shape the caller read, of which the bucket is
--          a leaf
-- Returns the shape's epoch; the marker is written only when that is
-- ARGV[1], the bucket then being a leaf of the current shape.
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
if epoch == tonumber(ARGV[1]) then
  redis.call('HSETNX', KEYS[2], '', '1')
end
return epoch
