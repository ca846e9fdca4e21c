-- lock_acquire.lua: a lock's acquire (README, "Library"): acquire.lua's grant without what only
-- an election needs (no announcement, no `confirmed` field, no address, no shard).
-- KEYS[1] the lease hash, KEYS[2] the fencing counter (same hash tag).
-- ARGV[1] holder identity, ARGV[2] token (new per term), ARGV[3] lease duration in ms,
-- ARGV[4] the client's wall clock in ms (acquired_at_ms), ARGV[5] the fence headroom in
-- microseconds (acquire.lua, ARGV[7]).
-- Returns {1, fence} when granted; {0, holder, fence, pttl_ms, address, reserved_for} when
-- held, as acquire.lua; {2} when acquire.lua must decide: the lease is reserved for this
-- holder, or the counter was missing (a new election or lost data: the counter is left
-- missing again, so that acquire.lua seeds it and quarantines the lease).
local ttl = redis.call('PTTL', KEYS[1])
if ttl ~= -2 then
  local cur = redis.call('HMGET', KEYS[1], 'holder', 'fence', 'address', 'reserved_for',
    'confirmed')
  local reserved = cur[4] or ''
  if reserved ~= '' and reserved == ARGV[1] then
    return {2}
  end
  local holder = cur[1] or ''
  if cur[5] == '0' then holder = '' end
  return {0, string.sub(holder, 1, 256), tonumber(cur[2]) or 0, ttl,
    string.sub(cur[3] or '', 1, 256), string.sub(reserved, 1, 256)}
end
local fence = redis.call('INCR', KEYS[2])
if fence == 1 then
  redis.call('DEL', KEYS[2])
  return {2}
end
-- The clock floor and its headroom: acquire.lua.
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
if now_us > fence then
  fence = now_us + tonumber(ARGV[5])
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', ARGV[2],
  'fence', string.format('%.0f', fence), 'acquired_at_ms', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, fence}
