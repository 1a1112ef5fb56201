-- First in every script of a growing store that acts on one bucket
-- (src/session/shape.rs): KEYS[1] is the bucket the caller routed to by its
-- copy of the group's shape. A bucket of the current shape holds the marker
-- field '' (written by the split or merge that made it, or by
-- compact_claim.lua); one without it may have been split or merged away
-- since that copy was made, so nothing is read or written, and the caller
-- reads the shape again. The script itself follows, as a function whose
-- reply goes back with the bucket's field count (compact_grown.lua), from
-- which the caller tells when to split the bucket.
if redis.call('HEXISTS', KEYS[1], '') == 0 then
  return redis.error_reply('RESHAPED the bucket is not in the shape the caller routed by')
end
local function routed_script()
