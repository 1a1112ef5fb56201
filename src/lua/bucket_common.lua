-- Shared by the bucket scripts; prepended to each. Every key a bucket script
-- touches comes in KEYS, all three under one hash tag:
-- KEYS[1]: the bucket's HASH, field -> record (or OUT_OF_LINE)
-- KEYS[2]: the bucket's ZSET, field -> expiry in unix seconds
-- KEYS[3]: the session's out-of-line record key
-- ARGV[1]: the field
-- Reads come before writes in every script, so a WRONGTYPE error aborts
-- before anything has changed.

-- 0xc1 is never used by MessagePack, and records start with an integer.
local OUT_OF_LINE = '\193'

