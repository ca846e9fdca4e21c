-- announce.lua: a term confirmed by its holder (after WAIT, or Redlock's majority and fence
-- raise, or at once when it took a reserved release) has begun: mark the lease confirmed and
-- announce it, after the release it took over when that is still pending (lua/release.lua).
-- KEYS[1] the lease hash, KEYS[2] the announcement channel (same hash tag).
-- ARGV[1] the term's token, ARGV[2] holder identity, ARGV[3] the term's fence, ARGV[4] (a
-- shard's only) the shard, named in the announcements.
-- Returns 1 when announced, 0 when the lease is gone or belongs to another term.
local shard = ARGV[4] and (',"shard":' .. ARGV[4]) or ''
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'confirmed', '1')
local p = redis.call('HMGET', KEYS[1], 'release_pending', 'released_by', 'released_fence',
  'address')
if p[1] == '1' then
  redis.call('HDEL', KEYS[1], 'release_pending')
  redis.call('PUBLISH', KEYS[2], '{"event":"released","holder":' .. cjson.encode(p[2] or '') ..
    ',"fence":' .. (p[3] or '0') .. ',"reserved_for":' .. cjson.encode(ARGV[2]) .. shard .. '}')
end
local address = p[4] or ''
redis.call('PUBLISH', KEYS[2], '{"event":"acquired","holder":' .. cjson.encode(ARGV[2]) ..
  ',"fence":' .. ARGV[3] .. ',"address":' ..
  (address ~= '' and cjson.encode(address) or 'null') .. shard .. '}')
return 1
