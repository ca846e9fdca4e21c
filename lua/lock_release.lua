-- lock_release.lua: a fenced lock's compare-and-delete (docs/protocol.md, "A lock's key"),
-- published to wake waiters; with a successor, the key is kept for it alone instead.
-- KEYS[1] the lock's string key, KEYS[2] the release channel (same hash tag).
-- ARGV[1] the holder's value, ARGV[2] the `released` message, ARGV[3] (optional) the
-- successor, ARGV[4] its window in ms.
-- Returns 1 when released, 0 when the key is gone or holds another value (nothing published).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[3] then
  redis.call('SET', KEYS[1], '>' .. ARGV[3] .. '>', 'PX', ARGV[4])
else
  redis.call('DEL', KEYS[1])
end
redis.call('PUBLISH', KEYS[2], ARGV[2])
return 1
