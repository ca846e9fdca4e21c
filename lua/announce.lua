-- announce.lua: a term confirmed by its holder (after WAIT, or Redlock's majority and fence
-- raise) has begun: mark the lease confirmed and announce it.
-- KEYS[1] the lease hash, KEYS[2] the announcement channel (same hash tag).
-- ARGV[1] the term's token, ARGV[2] holder identity, ARGV[3] the term's fence.
-- Returns 1 when announced, 0 when the lease is gone or belongs to another term.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'confirmed', '1')
local address = redis.call('HGET', KEYS[1], 'address') or ''
redis.call('PUBLISH', KEYS[2], '{"event":"acquired","holder":' .. cjson.encode(ARGV[2]) ..
  ',"fence":' .. ARGV[3] .. ',"address":' ..
  (address ~= '' and cjson.encode(address) or 'null') .. '}')
return 1
