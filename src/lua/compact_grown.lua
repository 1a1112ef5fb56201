end
-- Last in every script compact_route.lua begins: the script's reply, and
-- the number of fields its bucket holds now.
local reply = routed_script()
if type(reply) == 'table' and (reply.err or reply.ok) then
  return reply
end
if reply == nil then
  reply = false
end
return {reply, redis.call('HLEN', KEYS[1])}
