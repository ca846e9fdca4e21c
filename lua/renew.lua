-- renew.lua: compare-and-extend; only the holder of the term's token extends the lease.
-- KEYS[1] the lease hash, KEYS[2] the handover request key (same hash tag; an election's only:
-- a lock passes none).
-- ARGV[1] token, ARGV[2] lease duration in ms.
-- Returns 1 when extended, 2 when extended and a handover request is pending (the leader
-- may have missed its message), 0 when the lease is gone or belongs to another term.
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[2] and redis.call('PTTL', KEYS[2]) ~= -2 then
    return 2
  end
  return 1
end
return 0
