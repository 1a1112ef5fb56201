-- Inserts a new session into its bucket and lowers the bucket's index
-- entry to its expiry if that is earlier (or, with the server expiring
-- fields, gives the field its TTL: compact_expiry.lua).
-- KEYS[1..2], ARGV[1..2]: see compact_common.lua; KEYS[3] only for form 'o'
-- ARGV[3]: the form: 'i', 'b', 'o', 'p<size>', 'c<size>' or 's<size>' (see
--          make_value)
-- ARGV[4]: the payload: the identity in decimal ('i'), the record's check
--          and the record ('c<size>'), else the record
-- ARGV[5]: 'in' (ARGV[6] is seconds from now) or 'at' (unix seconds)
-- ARGV[6]: seconds
-- ARGV[7]: for a store with a user index, when the session's index entry
--          was written (unix seconds, by the caller's estimate of the
--          server's time), else absent; ARGV[8]: how long after that the
--          session may still land
-- Returns the expiry (the stored one when the same record is already
-- there: an insert sent twice); 0 if the field is taken (or a revocation
-- left a tombstone for it); -1 if an 'at' expiry passed; -2 if the entry was
-- written longer ago than ARGV[8] (or that far ahead).
local now, from = server_clock()
if ARGV[7] then
  local added, grace = tonumber(ARGV[7]), tonumber(ARGV[8])
  if now > added + grace or added > now + grace then
    return -2
  end
  if redis.call('HEXISTS', KEYS[1], ARGV[1] .. TOMBSTONE) == 1 then
    return 0
  end
end
local expiry = tonumber(ARGV[6])
if ARGV[5] == 'in' then
  expiry = from + expiry
elseif expiry <= now then
  return -1
end
-- HSETNX checks the HASH's type before anything is written.
local short = short_names(KEYS[1], ARGV[1], ARGV[3], ARGV[4], nil)
local value = make_value(ARGV[3], ARGV[4], expiry, short)
if redis.call('HSETNX', KEYS[1], ARGV[1], value) == 0 then
  -- A call the client sent again (a reply lost on the way) finds its own
  -- live session: done, at the expiry it got. Another record is a taken id.
  local stored = redis.call('HGET', KEYS[1], ARGV[1])
  local same
  if ARGV[3] == 'i' then
    same = is_integer_form(stored) and holds(stored, ARGV[4], '')
  elseif ARGV[3] == 'o' then
    same = is_out_of_line(stored) and redis.call('GET', KEYS[3]) == ARGV[4]
  elseif piece_size(ARGV[3]) then
    same = pieces_in(stored) ~= nil and stored_record(stored) == payload_record(ARGV[3], ARGV[4])
  else
    same = not is_integer_form(stored) and string.sub(stored, 5) == ARGV[4]
  end
  local stored_expiry = expiry_of(stored)
  if same and stored_expiry and stored_expiry > now then
    return stored_expiry
  end
  return 0
end
expire_field(KEYS[1], ARGV[1], expiry)
write_pieces(KEYS[1], ARGV[1], ARGV[3], ARGV[4], expiry, nil, short)
-- A foreign key where the index goes: take the field back out and report.
local ok, err = pcall(lower_index, expiry, ARGV[2])
if not ok then
  drop_pieces(KEYS[1], ARGV[1], value)
  redis.call('HDEL', KEYS[1], ARGV[1])
  if type(err) == 'table' then
    return err
  end
  return redis.error_reply(err)
end
if ARGV[3] == 'o' then
  redis.call('SET', KEYS[3], ARGV[4], 'EXAT', expiry)
end
return expiry
