-- handover.lua: the handover request key and the control channel.
-- KEYS[1] the request hash, KEYS[2] the control channel (same hash tag).
-- ARGV[1] the operation:
--   'request' ARGV[2] id, ARGV[3] to, ARGV[4] by, ARGV[5] TTL in ms, ARGV[6] the fence of the
--     term asked to hand over: writes the request unless another is pending and publishes
--     it. Returns {1} or {0, id, to, by, fence} (pending).
--   'read': returns {1, id, to, by, fence} when a request is pending, else {0}.
--   'answer' ARGV[2] id, ARGV[3] reason ('' accepted): deletes the request if it is still
--     that one, and publishes a refusal when there is a reason. Returns {1} or {0}.
-- Strings are cut to their first 256 bytes.
local function cut(s) return string.sub(s or '', 1, 256) end
local op = ARGV[1]
local cur = redis.call('HMGET', KEYS[1], 'id', 'to', 'by', 'fence')
if op == 'read' then
  if cur[1] then return {1, cut(cur[1]), cut(cur[2]), cut(cur[3]), cut(cur[4])} end
  return {0}
end
if op == 'request' then
  if cur[1] then return {0, cut(cur[1]), cut(cur[2]), cut(cur[3]), cut(cur[4])} end
  local fence = ARGV[6] or '0'
  redis.call('HSET', KEYS[1], 'id', ARGV[2], 'to', ARGV[3], 'by', ARGV[4], 'fence', fence)
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  -- Fences have 16 digits: cjson would print them rounded, so the number is written as is.
  redis.call('PUBLISH', KEYS[2], '{"event":"handover","id":' .. cjson.encode(ARGV[2]) ..
    ',"to":' .. cjson.encode(ARGV[3]) .. ',"by":' .. cjson.encode(ARGV[4]) ..
    ',"fence":' .. string.format('%.0f', tonumber(fence) or 0) .. '}')
  return {1}
end
if op == 'answer' then
  if cur[1] ~= ARGV[2] then return {0} end
  redis.call('DEL', KEYS[1])
  if ARGV[3] ~= '' then
    redis.call('PUBLISH', KEYS[2], '{"event":"refused","id":' .. cjson.encode(ARGV[2]) ..
      ',"to":' .. cjson.encode(cur[2] or '') .. ',"by":' .. cjson.encode(cur[3] or '') ..
      ',"fence":' .. string.format('%.0f', tonumber(cur[4]) or 0) ..
      ',"reason":' .. cjson.encode(ARGV[3]) .. '}')
  end
  return {1}
end
return redis.error_reply('handover.lua: unknown operation')
