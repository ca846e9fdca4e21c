-- plain_release.lua: a plain lock's compare-and-delete (README, "Library"), where the server
-- has neither `DELIFEQ key value` nor `DELEX key IFEQ value`.
-- KEYS[1] the lock's string key. ARGV[1] the holder's value.
-- Returns 1 when deleted, 0 when the key is gone or holds another value.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
