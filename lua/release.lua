-- release.lua: compare-and-delete, then tell the waiting candidates.
-- KEYS[1] the lease hash, KEYS[2] the release channel (same hash tag).
-- ARGV[1] token, ARGV[2] holder identity (the message published).
-- Returns 1 when released, 0 when the lease is gone or belongs to another term.
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], ARGV[2])
  return 1
end
return 0
