-- acquire.lua: take the lease when it is free, otherwise report who holds it.
-- KEYS[1] the lease hash, KEYS[2] the fencing counter (same hash tag).
-- ARGV[1] holder identity, ARGV[2] token (new per term), ARGV[3] lease duration in ms,
-- ARGV[4] the client's wall clock in ms (published as acquired_at_ms), ARGV[5] the address
-- the holder advertises ('' for none).
-- Returns {1, fence} when granted, {0, holder, fence, pttl_ms, address, reserved_for} when
-- held (holder '' while quarantined or reserved).
-- A missing counter means a new election or lost data (we cannot tell which): seed the
-- counter from the server clock in microseconds, so fences stay above any earlier ones, and
-- quarantine the lease for one lease duration under an empty placeholder holder, so that no
-- term can begin while a term granted before the loss may still be valid.
local ttl = redis.call('PTTL', KEYS[1])
if ttl ~= -2 then
  local cur = redis.call('HMGET', KEYS[1], 'holder', 'fence', 'address', 'reserved_for')
  return {0, cur[1] or '', tonumber(cur[2]) or 0, ttl, cur[3] or '', cur[4] or ''}
end
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
  local now = redis.call('TIME')
  local seed = string.format('%.0f', tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('SET', KEYS[2], seed)
  redis.call('HSET', KEYS[1], 'holder', '', 'token', '', 'fence', seed,
    'acquired_at_ms', string.sub(seed, 1, -4))
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {0, '', tonumber(seed), tonumber(ARGV[3]), '', ''}
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', ARGV[2], 'fence', fence,
    'acquired_at_ms', ARGV[4], 'address', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', ARGV[2], 'fence', fence,
    'acquired_at_ms', ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, fence}
