-- release.lua: compare-and-delete, optionally reserving the lease for a successor, then
-- announce it on the release channel as JSON.
-- KEYS[1] the lease hash, KEYS[2] the release channel, KEYS[3] the fencing counter (same
-- hash tag; not read: the released term's fence is the counter's value, as every grant and
-- Redlock's fence raise write both, and reading it would need GET beyond the minimal ACL).
-- ARGV[1] token, ARGV[2] holder identity, ARGV[3] successor ('' for none), ARGV[4] the
-- reservation's TTL in ms (handover_window).
-- Returns 1 when released, 0 when the lease is gone or belongs to another term.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
local fence = redis.call('HGET', KEYS[1], 'fence')
redis.call('DEL', KEYS[1])
local reserved = 'null'
if (ARGV[3] or '') ~= '' then
  reserved = cjson.encode(ARGV[3])
  redis.call('HSET', KEYS[1], 'holder', '', 'token', '', 'reserved_for', ARGV[3],
    'fence', fence)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
-- Fences have 16 digits: cjson would print them rounded, so numbers are formatted here.
redis.call('PUBLISH', KEYS[2], '{"event":"released","holder":' .. cjson.encode(ARGV[2]) ..
  ',"fence":' .. string.format('%.0f', tonumber(fence) or 0) .. ',"reserved_for":' ..
  reserved .. '}')
return 1
