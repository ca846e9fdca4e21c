-- fence_raise.lua (Redlock): make this term's fence the node's highest, only for our token.
-- KEYS[1] the lease hash, KEYS[2] the fencing counter (same hash tag).
-- ARGV[1] the term's token, ARGV[2] the term's fence M: the highest fence any node of the
-- acquiring majority returned.
-- Raises the counter to M when it is lower (never lowers it) and writes M as the lease's
-- fence. Returns 1 when done, 0 when the lease is gone or belongs to another term.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if counter < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
redis.call('HSET', KEYS[1], 'fence', ARGV[2])
return 1
