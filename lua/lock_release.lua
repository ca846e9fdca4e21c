-- lock_release.lua: a lock's compare-and-delete (README, "Library"): release.lua without a
-- successor, its message made by the caller.
-- KEYS[1] the lease hash, KEYS[2] the release channel (same hash tag).
-- ARGV[1] token, ARGV[2] the `released` message up to its fence
-- (`{"event":"released","holder":...,"fence":`), completed here with the lease's fence.
-- Returns 1 when released, 0 when the lease is gone or belongs to another term.
local cur = redis.call('HMGET', KEYS[1], 'token', 'fence')
if cur[1] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], ARGV[2] .. (cur[2] or '0') .. ',"reserved_for":null}')
return 1
