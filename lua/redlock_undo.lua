-- redlock_undo.lua (Redlock): take back a grant of an attempt that did not win a majority.
-- KEYS[1] the lease hash. ARGV[1] the attempt's token.
-- Compare-and-delete like release.lua, but publishes nothing: no term began, so nobody
-- waits for this, and waking every candidate at once after a split vote would only make
-- them split again. Returns 1 when deleted, 0 when the lease is not this attempt's.
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
