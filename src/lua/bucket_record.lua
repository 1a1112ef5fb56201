-- Included by the bucket scripts that read or write a record.

-- The stored record bytes and whether they live out of line.
local function current_record()
  local record = redis.call('HGET', KEYS[1], ARGV[1])
  if record == OUT_OF_LINE then
    return redis.call('GET', KEYS[3]), true
  end
  return record, false
end

-- Writes a record for a session whose expiry is known.
local function write_record(record, inline, expiry, was_out_of_line)
  if inline == '1' then
    redis.call('HSET', KEYS[1], ARGV[1], record)
    if was_out_of_line then
      redis.call('DEL', KEYS[3])
    end
  else
    redis.call('SET', KEYS[3], record, 'EXAT', expiry)
    redis.call('HSET', KEYS[1], ARGV[1], OUT_OF_LINE)
  end
end

