-- release_announce.lua: the releaser's follow-up of a reserved release (lua/release.lua):
-- publishes the release on the release channel unless the successor's term did.
-- KEYS[1] the lease hash, KEYS[2] the release channel (same hash tag).
-- ARGV[1] the releaser's identity, ARGV[2] the successor, ARGV[3] '1' to publish now if
-- still pending, '0' only to look, ARGV[4] the released term's fence, ARGV[5] (a shard's
-- only) the shard, named in the announcement.
-- Returns 0 when nothing is left to do (announced, or the lease moved on), 1 when published
-- here, 2 when still pending (the reservation stands, or the successor's term is not
-- confirmed yet) and not asked to publish.
local f = redis.call('HMGET', KEYS[1], 'release_pending', 'released_by', 'released_fence')
local pending = f[1] == '1' and f[2] == ARGV[1]
local vacant = redis.call('PTTL', KEYS[1]) == -2
if not (pending or vacant) then
  return 0
end
if pending and ARGV[3] ~= '1' then
  return 2
end
-- Vacant: the successor's term was undone before it was announced; say it here.
local fence = ARGV[4]
if pending then
  fence = f[3]
  redis.call('HDEL', KEYS[1], 'release_pending')
end
redis.call('PUBLISH', KEYS[2], '{"event":"released","holder":' .. cjson.encode(ARGV[1]) ..
  ',"fence":' .. fence .. ',"reserved_for":' .. cjson.encode(ARGV[2]) ..
  (ARGV[5] and (',"shard":' .. ARGV[5]) or '') .. '}')
return 1
