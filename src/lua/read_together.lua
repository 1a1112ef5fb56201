#!lua flags=no-writes
-- Reads several keys of one session in one step, so a write that moves
-- its record between them is never seen half done (a script rather than
-- a MULTI/EXEC: a store user needs no transaction commands). It writes
-- nothing, so it runs where writes are refused (a full `maxmemory`).
-- KEYS[i]: the key of read i
-- ARGV[2i - 1]: read i's command: GET, HGET, HEXISTS or ZSCORE
-- ARGV[2i]: its field or member ('' for GET)
-- Returns each read's reply, in order.
local out = {}
for i = 1, #KEYS do
  local command = ARGV[2 * i - 1]
  if command == 'GET' then
    out[i] = redis.call('GET', KEYS[i])
  else
    out[i] = redis.call(command, KEYS[i], ARGV[2 * i])
  end
end
return out
