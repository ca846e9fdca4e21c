-- acquire.lua: take the lease when it is free (or reserved for us), otherwise report who
-- holds it.
-- KEYS[1] the lease hash, KEYS[2] the fencing counter, KEYS[3] the announcement channel
-- (same hash tag); a shard's (README, "Shards"): KEYS[4] the election's quarantine key.
-- ARGV[1] holder identity, ARGV[2] token (new per term), ARGV[3] lease duration in ms,
-- ARGV[4] the client's wall clock in ms (published as acquired_at_ms), ARGV[5] the address
-- the holder advertises ('' for none), ARGV[6] '1' to announce the grant here, '0' when the
-- caller confirms it later (WAIT, Redlock: lua/announce.lua); until then the lease is marked
-- unconfirmed and reported without a holder, so nobody names a leader whose term may be undone.
-- ARGV[7] (a shard's only) the shard, named in the announcement. (A library lock has its own
-- key and lua/lock_acquire.lua.)
-- Returns {1, fence} when granted ({1, fence, 1} when it took a reserved release that is
-- not announced yet: the caller announces both with lua/announce.lua), {0, holder, fence,
-- pttl_ms, address, reserved_for} when held (holder '' while quarantined, reserved or
-- unconfirmed; strings cut to their first 256 bytes).
-- A missing counter means a new election or lost data (we cannot tell which): seed the
-- counter from the server clock in microseconds, so fences stay above any earlier ones, and
-- quarantine the lease for one lease duration under an empty placeholder holder, so that no
-- term can begin while a term granted before the loss may still be valid. A granted fence
-- is also at least the server clock in microseconds.
-- A shard's quarantine is the election's: the placeholder is the quarantine key, which every
-- shard's acquire reads first, so no shard is granted until it expires.
local shard = ARGV[7] and (',"shard":' .. ARGV[7]) or ''
if KEYS[4] then
  local q = redis.call('PTTL', KEYS[4])
  if q ~= -2 then
    return {0, '', tonumber(redis.call('HGET', KEYS[4], 'fence')) or 0, q, '', ''}
  end
end
local ttl = redis.call('PTTL', KEYS[1])
local pending = nil
if ttl ~= -2 then
  local cur = redis.call('HMGET', KEYS[1], 'holder', 'fence', 'address', 'reserved_for',
    'confirmed', 'release_pending', 'released_by', 'released_fence')
  local reserved = cur[4] or ''
  if reserved == '' or reserved ~= ARGV[1] then
    local holder = cur[1] or ''
    if cur[5] == '0' then holder = '' end
    return {0, string.sub(holder, 1, 256), tonumber(cur[2]) or 0, ttl,
      string.sub(cur[3] or '', 1, 256), string.sub(reserved, 1, 256)}
  end
  if cur[6] == '1' then pending = {cur[7] or '', cur[8] or '0'} end
  redis.call('DEL', KEYS[1])
end
local fence = redis.call('INCR', KEYS[2])
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
if fence == 1 then
  local seed = string.format('%.0f', now_us)
  redis.call('SET', KEYS[2], seed)
  local placeholder = KEYS[4] or KEYS[1]
  redis.call('HSET', placeholder, 'holder', '', 'token', '', 'fence', seed,
    'acquired_at_ms', string.sub(seed, 1, -4))
  redis.call('PEXPIRE', placeholder, ARGV[3])
  return {0, '', tonumber(seed), tonumber(ARGV[3]), '', ''}
end
-- A fence never falls behind the server clock either: a failover to a replica that missed
-- the last grants (asynchronous replication) would otherwise hand out a fence again. The
-- counter always holds the last fence granted.
if now_us > fence then
  fence = now_us
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
end
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', ARGV[2],
  'fence', string.format('%.0f', fence), 'acquired_at_ms', ARGV[4],
  'confirmed', ARGV[6] == '0' and '0' or '1')
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'address', ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if pending then
  -- The release taken over is not published yet: the caller announces both, the release
  -- first (lua/announce.lua), once it has its reply.
  redis.call('HSET', KEYS[1], 'release_pending', '1', 'released_by', pending[1],
    'released_fence', pending[2])
  return {1, fence, 1}
end
if ARGV[6] == '1' then
  -- Fences have 16 digits: cjson would print them rounded, so numbers are formatted here.
  redis.call('PUBLISH', KEYS[3], '{"event":"acquired","holder":' .. cjson.encode(ARGV[1]) ..
    ',"fence":' .. string.format('%.0f', fence) .. ',"address":' ..
    (ARGV[5] ~= '' and cjson.encode(ARGV[5]) or 'null') .. shard .. '}')
end
return {1, fence}
