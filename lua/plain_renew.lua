-- plain_renew.lua: a plain lock's compare-and-extend (README, "Library"), where the server has
-- no `SET key value IFEQ value PX ms`.
-- KEYS[1] the lock's string key. ARGV[1] the holder's value, ARGV[2] the TTL in ms.
-- Returns 1 when extended, 0 when the key is gone or holds another value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
