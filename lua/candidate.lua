-- candidate.lua: the heartbeat of one candidate, and the live candidates of the election
-- (README "Candidates").
-- KEYS[1] the entries (hash: identity -> JSON entry), KEYS[2] the lease hash (read too, so
-- that the heartbeat doubles as a follower's read of the lease), KEYS[3] the index (sorted
-- set: identity -> seen_at_ms), KEYS[4] the registry's state (hash: version, cursor); one
-- hash tag.
-- ARGV[1] identity ('' only reads), ARGV[2] the entry as JSON without seen_at_ms ('' removes
-- it), ARGV[3] lease duration in ms (an entry not refreshed for that long is gone), ARGV[4]
-- this process's instance id, ARGV[5] the version the caller last read ('' none), ARGV[6]
-- the reader's identity (a read lists its entry as a write lists the caller's).
-- A writer stamps seen_at_ms and its instance, and healthy_since_ms: kept from its previous
-- entry (same instance) while it stays healthy, the server clock when it turns healthy,
-- absent while unhealthy. A live entry of its identity from another instance is a conflict;
-- a new identity is refused when MAX_LIVE entries are live. The version changes when an
-- entry readers may hold is added, removed or changed (not at a plain refresh).
-- Every writer then checks a few entries (SWEEP each): index entries in the future and
-- out of date, and the hash from a stored HSCAN cursor. An entry that is not what leaderd
-- writes (over MAX_ENTRY bytes, not JSON, a field of another type or out of range,
-- seen_at_ms in the future) is removed; a stale one too; a live one not indexed is indexed.
-- Returns {now_ms, pttl_ms, holder, fence, reserved_for, confirmed, address, version,
-- refused, conflict, mode, identity, entry, ...}: the lease as acquire.lua reports it (pttl
-- -2: no lease, -3: unknown, a field longer than 256 bytes); then mode 'full' and the live
-- entries (at most MAX_LIVE, the holder's and the caller's or reader's besides), or
-- 'changes' (the caller's version was current before this call) and what this call
-- changed, entry '' when removed, with the caller's own entry.
local MAX_ENTRY = 1024
local MAX_LIVE = 1000
local SWEEP = 8

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
local me, instance = ARGV[1], ARGV[4]
local H, Z, M = KEYS[1], KEYS[3], KEYS[4]
local writing = me ~= ''
local reader = me
if not writing then reader = ARGV[6] or '' end

local version = redis.call('HGET', M, 'version') or ''
if #version > 20 or not string.match(version, '^%d+$') then version = '' end
local before = version
local changes = {}

local function changed(id, text)
  if #changes == 0 then
    local v = tonumber(version) or 0
    if v > now * 1000 + 1e12 then v = 0 end
    version = string.format('%.0f', math.max(v + 1, now * 1000))
    redis.call('HSET', M, 'version', version)
  end
  changes[#changes + 1] = id
  changes[#changes + 1] = text
end

local function int(x, hi)
  return type(x) == 'number' and x == math.floor(x) and x >= 0 and x <= hi
end
local function text(x, max)
  return type(x) == 'string' and #x <= max
end
local function absent(x)
  return x == nil or x == cjson.null
end

-- The entry decoded when it is what leaderd writes, else nil.
local function decode(id, raw)
  if not raw or #raw > MAX_ENTRY or #id == 0 or #id > 256 then return nil end
  local ok, e = pcall(cjson.decode, raw)
  if not ok or type(e) ~= 'table' then return nil end
  local fine = int(e['seen_at_ms'], now) and text(e['state'], 32) and #e['state'] > 0
    and type(e['healthy']) == 'boolean'
    and (absent(e['contending']) or type(e['contending']) == 'boolean')
    and int(e['priority'], 1000)
    and (absent(e['address']) or text(e['address'], 256))
    and text(e['version'], 64) and int(e['started_at_ms'], 2^53)
    and (absent(e['healthy_since_ms']) or int(e['healthy_since_ms'], 2^53))
    and (absent(e['instance']) or text(e['instance'], 64))
  if fine then return e end
  return nil
end

local function live(e)
  return e ~= nil and now - e['seen_at_ms'] < ttl
end

-- The raw entry when it exists and is at most MAX_ENTRY bytes.
local function read(id)
  if redis.call('HSTRLEN', H, id) > MAX_ENTRY then return nil end
  return redis.call('HGET', H, id) or nil
end

local SHOWN = {'state', 'healthy', 'contending', 'priority', 'address', 'version',
  'started_at_ms', 'healthy_since_ms'}
local function same(a, b)
  for _, f in ipairs(SHOWN) do
    local x, y = a[f], b[f]
    if absent(x) then x = nil end
    if absent(y) then y = nil end
    if x ~= y then return false end
  end
  return true
end

-- Brings one identity's index entry in line with its hash entry (raw when known).
local function fix(id, raw)
  if raw == nil then raw = read(id) end
  local e = decode(id, raw)
  local score = tonumber(redis.call('ZSCORE', Z, id))
  if live(e) then
    if score ~= e['seen_at_ms'] then
      redis.call('ZADD', Z, e['seen_at_ms'], id)
      if not (score and now - score < ttl and score <= now) then changed(id, raw) end
    end
    return
  end
  redis.call('HDEL', H, id)
  if score then redis.call('ZREM', Z, id) end
  -- A candidate gone within the last lease duration may be in a reader's list.
  if e and now - e['seen_at_ms'] < 2 * ttl then changed(id, '') end
end

local refused, conflict = 0, 0
local mine = nil
if writing then
  local old = decode(me, read(me))
  local other = live(old) and type(old['instance']) == 'string' and old['instance'] ~= instance
  if other then conflict = 1 end
  if ARGV[2] == '' then
    if not other then
      redis.call('HDEL', H, me)
      redis.call('ZREM', Z, me)
      if live(old) then changed(me, '') end
    end
  elseif not live(old)
    and redis.call('ZCOUNT', Z, '(' .. (now - ttl), now) >= MAX_LIVE then
    refused = 1
  else
    local entry = cjson.decode(ARGV[2])
    entry['seen_at_ms'] = now
    entry['instance'] = instance
    local since = nil
    if entry['healthy'] == true then
      local kept = old and old['instance'] == instance and old['healthy'] == true
      since = kept and tonumber(old['healthy_since_ms']) or now
    end
    entry['healthy_since_ms'] = since
    mine = cjson.encode(entry)
    redis.call('HSET', H, me, mine)
    redis.call('ZADD', Z, now, me)
    if not (live(old) and same(old, entry)) then changed(me, mine) end
  end
  for _, k in ipairs({H, Z, M}) do redis.call('PEXPIRE', k, 2 * ttl) end

  for _, id in ipairs(redis.call('ZRANGEBYSCORE', Z, '(' .. now, '+inf', 'LIMIT', 0, SWEEP)) do
    fix(id)
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', Z, '-inf', now - ttl, 'LIMIT', 0, SWEEP)) do
    fix(id)
  end
  local cursor = redis.call('HGET', M, 'cursor') or '0'
  if #cursor > 18 or not string.match(cursor, '^%d+$') then cursor = '0' end
  local scan = redis.pcall('HSCAN', H, cursor, 'COUNT', SWEEP)
  if scan['err'] then scan = {'0', {}} end
  redis.call('HSET', M, 'cursor', scan[1])
  local found = scan[2]
  for i = 1, #found, 2 do
    if found[i] ~= me then fix(found[i], found[i + 1]) end
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
out[#out + 1] = version
out[#out + 1] = refused
out[#out + 1] = conflict

if ARGV[5] ~= '' and ARGV[5] == before then
  out[#out + 1] = 'changes'
  local listed = false
  for i = 1, #changes do
    out[#out + 1] = changes[i]
    if i % 2 == 1 and changes[i] == me then listed = true end
  end
  if mine and not listed then
    out[#out + 1] = me
    out[#out + 1] = mine
  end
  return out
end
out[#out + 1] = 'full'
local ids = redis.call('ZRANGEBYSCORE', Z, '(' .. (now - ttl), now, 'LIMIT', 0, MAX_LIVE)
local listed = {}
for _, id in ipairs(ids) do listed[id] = true end
for _, id in ipairs({reader, string.sub(lease[1] or '', 1, 256)}) do
  if id ~= '' and not listed[id] then
    listed[id] = true
    ids[#ids + 1] = id
  end
end
for _, id in ipairs(ids) do
  local raw = read(id)
  if raw then
    out[#out + 1] = id
    out[#out + 1] = raw
  end
end
return out
