-- Included by the string scripts, for JSON values.

-- JSON values carry their expiry as the first "expires_at" member; it is
-- rewritten on touch, and zeroed when comparing with an expected record.
local function with_expiry(json, expiry)
  return (string.gsub(json, '"expires_at":%d+', '"expires_at":' .. expiry, 1))
end

