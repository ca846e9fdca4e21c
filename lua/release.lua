-- release.lua: compare-and-delete, optionally reserving the lease for a successor, then
-- announce it as JSON.
-- KEYS[1] the lease hash, KEYS[2] the release channel, KEYS[3] the fencing counter (same
-- hash tag; not read: the released term's fence is the counter's value, as every grant and
-- Redlock's fence raise write both, and reading it would need GET beyond the minimal ACL),
-- KEYS[4] the successor's own channel (`<released>:<identity>`; without it a reserved
-- release is published on the release channel at once).
-- ARGV[1] token, ARGV[2] holder identity, ARGV[3] successor ('' for none), ARGV[4] the
-- reservation's TTL in ms (handover_window), ARGV[5] (a shard's only) the shard, named in
-- the announcement.
-- A reserved release is told to the successor alone first: the placeholder keeps the
-- release pending (`release_pending`, `released_by`, `released_fence`), and it is published
-- on the release channel when the successor's term is announced (lua/announce.lua) or, if
-- the successor does not come, by the releaser a moment later (lua/release_announce.lua).
-- So the successor acquires before the other followers wake.
-- Returns 1 when released, 0 when the lease is gone or belongs to another term.
local shard = ARGV[5] and (',"shard":' .. ARGV[5]) or ''
local cur = redis.call('HMGET', KEYS[1], 'token', 'fence')
if cur[1] ~= ARGV[1] then
  return 0
end
local fence = cur[2]
redis.call('DEL', KEYS[1])
local reserved = 'null'
local channel = KEYS[2]
if (ARGV[3] or '') ~= '' then
  reserved = cjson.encode(ARGV[3])
  redis.call('HSET', KEYS[1], 'holder', '', 'token', '', 'reserved_for', ARGV[3],
    'fence', fence)
  if (KEYS[4] or '') ~= '' then
    redis.call('HSET', KEYS[1], 'released_by', ARGV[2], 'released_fence', fence,
      'release_pending', '1')
    channel = KEYS[4]
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
-- Fences have 16 digits: cjson would print them rounded, so numbers are formatted here.
redis.call('PUBLISH', channel, '{"event":"released","holder":' .. cjson.encode(ARGV[2]) ..
  ',"fence":' .. string.format('%.0f', tonumber(fence) or 0) .. ',"reserved_for":' ..
  reserved .. shard .. '}')
return 1
