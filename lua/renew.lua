-- renew.lua: compare-and-extend; only the holder of the term's token extends the lease.
-- KEYS[1] the lease hash. ARGV[1] token, ARGV[2] lease duration in ms.
-- Returns 1 when extended, 0 when the lease is gone or belongs to another term.
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
