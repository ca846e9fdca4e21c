-- shard_renew.lua: compare-and-extend of every shard a replica owns, in one call (README,
-- "Shards"); each shard as lua/renew.lua does it for one lease.
-- KEYS[i] shard i's lease hash (all with the election's hash tag).
-- ARGV[1] lease duration in ms, ARGV[i + 1] the token of the term held on KEYS[i].
-- Returns one integer per key: 1 when extended, 0 when that shard's lease is gone or belongs
-- to another term.
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('HGET', key, 'token') == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
