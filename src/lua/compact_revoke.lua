-- Revokes one session of a user, for a store with a user index; or, for
-- the sweeper, settles an index entry whose session looked gone.
-- KEYS[1..], ARGV[1..2]: see compact_common.lua
-- ARGV[3]: the user's identity in decimal if it is an integer, else ''
-- ARGV[4]: the user's identity as a record begins with it (MessagePack);
--          '' (with ARGV[3] '') for the sweeper: a live session is kept
-- ARGV[5]: how long a create whose index entry was already written may
--          still land, by any server's clock (the grace and twice the skew)
-- ARGV[6]: for a revocation, when it read the user's index entries (unix
--          seconds, by the caller's estimate of the server's time), else ''
-- ARGV[7]: for a revocation, how long after that it may act (the grace)
-- ARGV[8]: for a revocation, the length of an id in bytes
-- Returns {code, successors...}. The code: 1 if the user's live session
-- was removed; 0 if a live session is kept (another user's, or any for the
-- sweeper, or a value in neither form); 2 if there was none, and a
-- tombstone now refuses a create of it for ARGV[5] seconds; 3 if it had
-- expired (and is reclaimed here): created once, so no create of it can
-- be in flight; 4 (nothing done) if the revocation read its entries more
-- than ARGV[7] seconds ago: it must read them again, as a rotation's
-- forward record may have lapsed since. For a revocation, the ids a
-- rotation recorded beside the session (compact_forward.lua) follow the
-- code: the caller revokes them too.
local now = server_clock()
if ARGV[6] and ARGV[6] ~= '' and now > tonumber(ARGV[6]) + tonumber(ARGV[7]) then
  return {4}
end
local reply = {0}
if ARGV[4] ~= '' then
  local forward = redis.call('HGET', KEYS[1], ARGV[1] .. FORWARD)
  if forward then
    local n = tonumber(ARGV[8])
    for i = 6, #forward, n do
      reply[#reply + 1] = string.sub(forward, i, i + n - 1)
    end
  end
end
local value = redis.call('HGET', KEYS[1], ARGV[1])
local expiry = value and expiry_of(value)
if value and not expiry then
  -- In neither form: no one's session, left for inspection.
  return reply
end
if value and expiry <= now then
  drop_session(value)
  reply[1] = 3
  return reply
end
if value then
  if not owned_by(value, ARGV[3], ARGV[4]) then
    return reply
  end
  drop_session(value)
  reply[1] = 1
  return reply
end
local until_ = now + tonumber(ARGV[5])
redis.call('HSET', KEYS[1], ARGV[1] .. TOMBSTONE, be32(until_) .. TOMBSTONE)
expire_field(KEYS[1], ARGV[1] .. TOMBSTONE, until_)
lower_index(until_, ARGV[2])
reply[1] = 2
return reply
