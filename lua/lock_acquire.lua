-- lock_acquire.lua: a fenced lock's grant off its common path (docs/protocol.md, "A lock's
-- key"). The common path is the client's `MULTI`, `SET lock value NX PX ttl`, `INCR fence`,
-- `TIME`, `EXEC`; this script grants when that cannot: the first grant of a client, or one
-- whose fence must be raised to the server clock, or after the fence counter went missing
-- (seed and quarantine), or a reserved lock taken by its successor.
-- KEYS[1] the lock's string key, KEYS[2] the fence counter (same hash tag).
-- ARGV[1] the value `<holder>:<token>`, ARGV[2] the lease duration in ms, ARGV[3] the fence
-- headroom in microseconds, ARGV[4] the fence the client's MULTI got with ARGV[1] when it
-- took the lock ('' when this script is to take it), ARGV[5] the counter's lead over the
-- server clock in microseconds below which it is raised.
-- Returns {1, fence, server_us} when granted; {0, value, pttl_ms, counter} otherwise (value
-- '' for the quarantine, `>identity>` for a reservation, cut to 256 bytes).
local function held(value)
  return {0, string.sub(value or '', 1, 256), redis.call('PTTL', KEYS[1]),
    tonumber(redis.call('GET', KEYS[2]) or '0') or 0}
end
local fence
if ARGV[4] == '' then
  if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    local cur = redis.call('GET', KEYS[1])
    if cur ~= '>' .. string.match(ARGV[1], '^(.*):') .. '>' then
      return held(cur)
    end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  end
  fence = redis.call('INCR', KEYS[2])
else
  local cur = redis.call('GET', KEYS[1])
  if cur ~= ARGV[1] then
    return held(cur)
  end
  fence = tonumber(ARGV[4])
end
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local headroom = tonumber(ARGV[3])
if fence == 1 then
  -- The counter was missing: a new lock, or lost data. As acquire.lua does: seeded from the
  -- server clock (plus the headroom every raise adds), above every fence granted before, and
  -- nothing granted for one lease duration (the quarantine, an empty value).
  local seed = string.format('%.0f', now_us + headroom)
  redis.call('SET', KEYS[2], seed)
  redis.call('SET', KEYS[1], '', 'PX', ARGV[2])
  return {0, '', tonumber(ARGV[2]), tonumber(seed)}
end
if fence < now_us + tonumber(ARGV[5]) then
  -- The clock floor: a fence never falls behind the server clock, so after a failover to a
  -- replica that missed the last grants it is still above theirs. Raised `headroom` past
  -- the clock (before the clock passes it), so that the next grants of about that long
  -- need only the common path.
  fence = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') or 0, now_us + headroom)
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
end
return {1, fence, now_us}
