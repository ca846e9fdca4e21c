-- candidate.lua: the heartbeat of one candidate, and the live candidates of the election.
-- KEYS[1] the candidates hash (field = identity, value = JSON entry).
-- ARGV[1] identity ('' only reads), ARGV[2] the entry as JSON without seen_at_ms ('' removes
-- the entry), ARGV[3] lease duration in ms (an entry not refreshed for that long is gone).
-- A writer stamps seen_at_ms from the server clock, and healthy_since_ms too: kept from its
-- previous entry (the same process: same started_at_ms) while it stays healthy, the server
-- clock now when it turns healthy, absent while unhealthy. It deletes the stale entries it
-- finds and keeps the hash for 2 lease durations.
-- KEYS[2] the lease hash (same hash tag), read too so that the heartbeat doubles as a
-- follower's read of the lease.
-- Returns {now_ms, pttl_ms, holder, fence, reserved_for, confirmed, address, identity,
-- entry_json, ...}: the lease as acquire.lua reports it (pttl -2: no lease, -3: unknown,
-- a field longer than 256 bytes), then the live entries.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
local writing = ARGV[1] ~= ''
if writing then
  if ARGV[2] == '' then
    redis.call('HDEL', KEYS[1], ARGV[1])
  else
    local entry = cjson.decode(ARGV[2])
    entry['seen_at_ms'] = now
    local since = nil
    if entry['healthy'] == true then
      local ok, old = pcall(cjson.decode, redis.call('HGET', KEYS[1], ARGV[1]) or '')
      local same = ok and type(old) == 'table' and old['healthy'] == true
        and old['started_at_ms'] == entry['started_at_ms']
      since = same and tonumber(old['healthy_since_ms']) or now
    end
    entry['healthy_since_ms'] = since
    redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(entry))
    redis.call('PEXPIRE', KEYS[1], 2 * ttl)
  end
end
local pttl = redis.call('PTTL', KEYS[2])
local lease = {'', '', '', '', ''}
if pttl ~= -2 then
  -- A field no leaderd writes that long (a forged holder) is not copied: lease unknown.
  for _, f in ipairs({'holder', 'reserved_for', 'address'}) do
    if redis.call('HSTRLEN', KEYS[2], f) > 256 then pttl = -3 end
  end
  if pttl ~= -3 then
    lease = redis.call('HMGET', KEYS[2], 'holder', 'fence', 'reserved_for', 'confirmed',
      'address')
  end
end
local out = {now, pttl}
for i = 1, 5 do
  out[#out + 1] = string.sub(lease[i] or '', 1, 256)
end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, e = pcall(cjson.decode, all[i + 1])
  local seen = ok and type(e) == 'table' and tonumber(e['seen_at_ms']) or nil
  if seen == nil or now - seen >= ttl then
    if writing then redis.call('HDEL', KEYS[1], all[i]) end
  elseif #out < 2007 then
    out[#out + 1] = string.sub(all[i], 1, 256)
    out[#out + 1] = string.sub(all[i + 1], 1, 2048)
  end
end
return out
