-- Takes back what a plain create wrote into a growing store's bucket that
-- turned out to be no bucket of the current shape (a mark a split or merge
-- left, shape_common.lua, or a key of none): the fields go only while the
-- key still lacks its marker, so a bucket made there since (a merge
-- writes its parent anew) loses nothing.
-- KEYS[1]: the key the create wrote
-- ARGV: the fields it wrote (the session's field, its pieces')
-- Returns the fields removed.
if redis.call('HEXISTS', KEYS[1], '') == 1 then
  return 0
end
return redis.call('HDEL', KEYS[1], unpack(ARGV))
