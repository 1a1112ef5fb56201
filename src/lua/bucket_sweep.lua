-- One sweep step on one bucket: removes its expired sessions or, for the
-- session cap, every session at or before a cutoff in (expiry, field)
-- order; at most ARGV[1] entries. First repairs a bucket whose HASH and
-- ZSET disagree.
-- KEYS[1]: the bucket's HASH; KEYS[2]: the bucket's ZSET
-- ARGV[1]: most entries to remove in this step
-- ARGV[2]: '' to remove expired sessions; or the cap's cutoff expiry
-- ARGV[3]: the cap's cutoff field
-- Out-of-line records carry their session's expiry as EXAT on their own key,
-- so Redis reclaims an expired one itself. A live session the cap evicts
-- whose record is out of line is left in place and its field returned: the
-- caller evicts it with bucket_evict.lua, which names that key, so no record
-- outlives its entry whenever the caller stops.
-- Returns {expired removed, live removed, oldest removed expiry or -1,
--          1 if this step hit its limit else 0, entries removed by repair,
--          n, n fields for bucket_evict.lua, then the fields the repair
--          removed whose records may live out of line (their keys may be
--          deleted)}.
local OUT_OF_LINE = '\193'
local now = tonumber(redis.call('TIME')[1])
local limit = tonumber(ARGV[1])

-- A field in one key and not the other is a session no load can see: an
-- allkeys-* eviction policy evicts one key of a bucket and keeps the other.
-- Both kinds are removed, and the fields that may have a record out of line
-- are returned.
local function repair()
  local removed, orphaned = 0, {}
  local fields = redis.call('HKEYS', KEYS[1])
  for i = 1, #fields, 500 do
    local part = {unpack(fields, i, math.min(i + 499, #fields))}
    local scores = redis.call('ZMSCORE', KEYS[2], unpack(part))
    local values = redis.call('HMGET', KEYS[1], unpack(part))
    local gone = {}
    for j = 1, #part do
      if not scores[j] then
        gone[#gone + 1] = part[j]
        if values[j] == OUT_OF_LINE then
          orphaned[#orphaned + 1] = part[j]
        end
      end
    end
    call_in_slices('HDEL', KEYS[1], gone)
    removed = removed + #gone
  end
  local members = redis.call('ZRANGE', KEYS[2], 0, -1)
  for i = 1, #members, 500 do
    local part = {unpack(members, i, math.min(i + 499, #members))}
    local values = redis.call('HMGET', KEYS[1], unpack(part))
    local gone = {}
    for j = 1, #part do
      if not values[j] then
        -- Whether its record was out of line went with the HASH: its
        -- record key, if any, is deleted too.
        gone[#gone + 1] = part[j]
        orphaned[#orphaned + 1] = part[j]
      end
    end
    call_in_slices('ZREM', KEYS[2], gone)
    removed = removed + #gone
  end
  return removed, orphaned
end

-- Both keys' types are checked here, before anything is written: a key of
-- another type is an error that changes nothing.
local hlen = redis.call('HLEN', KEYS[1])
local card = redis.call('ZCARD', KEYS[2])
local reply = {0, 0, -1, 0, 0, 0}
local orphaned = {}
if hlen ~= card then
  reply[5], orphaned = repair()
  card = redis.call('ZCARD', KEYS[2])
end

local function finish(evict)
  reply[6] = #evict
  for i = 1, #evict do
    reply[#reply + 1] = evict[i]
  end
  for i = 1, #orphaned do
    reply[#reply + 1] = orphaned[i]
  end
  return reply
end

local cap = ARGV[2] ~= ''
local cutoff, cutoff_field = now, nil
if cap then
  cutoff, cutoff_field = tonumber(ARGV[2]), ARGV[3]
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if not first[2] or tonumber(first[2]) > cutoff then
  return finish({})
end
if not cap and card <= limit then
  local newest = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
  if newest <= now then
    -- Every entry has expired: drop both keys (each checked above to be
    -- ours) rather than empty two listpacks one field at a time.
    redis.call('DEL', KEYS[1], KEYS[2])
    reply[1], reply[3] = card, tonumber(first[2])
    return finish({})
  end
end

-- Live while now < expiry, so expired means expiry <= now.
local entries = redis.call('ZRANGE', KEYS[2], '-inf', cutoff, 'BYSCORE', 'LIMIT', 0, limit,
  'WITHSCORES')
if #entries == 2 * limit then
  reply[4] = 1
end
local values = {}
if cap then
  local fields = {}
  for i = 1, #entries, 2 do
    fields[#fields + 1] = entries[i]
  end
  values = redis.call('HMGET', KEYS[1], unpack(fields))
end
local take, evict = {}, {}
for i = 1, #entries, 2 do
  local field, expiry = entries[i], tonumber(entries[i + 1])
  if cap and not within_cutoff(expiry, field, cutoff, cutoff_field) then
    -- Entries come in (expiry, field) order: the rest lie past the cutoff.
    reply[4] = 0
    break
  end
  if expiry > now and values[(i + 1) / 2] == OUT_OF_LINE then
    evict[#evict + 1] = field
  else
    if reply[3] == -1 then
      reply[3] = expiry
    end
    take[#take + 1] = field
    if expiry <= now then
      reply[1] = reply[1] + 1
    else
      reply[2] = reply[2] + 1
    end
  end
end
if #take == card then
  redis.call('DEL', KEYS[1], KEYS[2])
elseif #take > 0 then
  call_in_slices('HDEL', KEYS[1], take)
  if not cap and reply[4] == 0 then
    -- Every expired entry was found: remove them as one range, one pass
    -- over the listpack rather than one search per member.
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  else
    call_in_slices('ZREM', KEYS[2], take)
  end
end
return finish(evict)
