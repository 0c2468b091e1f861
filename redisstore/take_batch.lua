-- take_batch.lua: take_gcra.lua for several demands of one scope at once,
-- decided in the order given, as if each were its own call at the same
-- instant. Take sends a batch when demands of one scope arrive while an
-- earlier call of that scope is in flight (WithBatching, batch.go): one
-- round trip, one TIME, one GET and one write per key however many
-- demands share it, instead of all of them per demand.
--
-- Units: integer microseconds of Redis's clock, as in take.lua.
--
-- KEYS: for each demand in order, its pause keys, then its limit keys (one
-- per limit). A key may appear for several demands. All share one hash
-- tag {scope}; no other key is touched.
--
-- ARGV[1]  the number of demands; "R" when go-redis sends the call again
--          (ReplayDetect, resend.go): refused with an error beginning
--          "RESENT", nothing decided
-- ARGV[2]  "" for Redis's TIME; from tests only, the current instant
-- then per demand: P (pause keys), L (limits), MaxWait, then L pairs
--          a = cost*T, b = Burst*T - cost*T (T = ceil(Per/Rate))
--
-- Reply: a table with one entry per demand, in take_gcra.lua's format: an
-- integer (the TAT set) when granted at once on one limit; otherwise a
-- string "1 delay -1 -1 TAT..." when granted, "0 delay limit pause" when
-- refused.

local n = tonumber(ARGV[1])
if not n then
  return redis.error_reply('RESENT: call sent again, not decided again')
end
local now, slack
if ARGV[2] == '' then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
  slack = 0
else
  -- A client-given instant need not advance with Redis's clock, so keys
  -- get an hour of extra life (tests only), as in take.lua.
  now = tonumber(ARGV[2])
  slack = 3600000
end
local fmt, floor = string.format, math.floor
local G = 1000000 -- the expiry grid of GCRA keys (take_gcra.lua)

-- cur holds every key read so far: its value as the demands decided so
-- far left it. old holds the value Redis had, and changed lists the limit
-- keys to write back, once each, at the end.
local cur, old, changed = {}, {}, {}
local function get(key)
  local v = cur[key]
  if v == nil then
    v = tonumber(redis.call('GET', key)) or 0
    cur[key], old[key] = v, v
  end
  return v
end

local out = {}
local k, a = 1, 3 -- the next demand's first key and argument
for d = 1, n do
  local np, nl = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local maxWait = ARGV[a + 2]
  a = a + 3
  local t, pause, binding = now, -1, -1
  for i = 0, np - 1 do
    local p = get(KEYS[k + i])
    if p > t then t, pause = p, i end
  end
  k = k + np
  for i = 0, nl - 1 do
    local e = get(KEYS[k + i]) - ARGV[a + 2 * i + 1]
    if e > t then t, binding = e, i end
  end
  if t > now and t - now > tonumber(maxWait) then
    out[d] = fmt('0 %d %d %d', t - now, binding, pause)
  else
    local marks, tat = ''
    for i = 0, nl - 1 do
      local key = KEYS[k + i]
      tat = cur[key]
      if tat < t then tat = t end
      tat = tat + ARGV[a + 2 * i]
      if not changed[key] then
        changed[#changed + 1] = key
        changed[key] = true
      end
      cur[key] = tat
      marks = marks .. ' ' .. fmt('%d', tat)
    end
    if t == now and nl == 1 then
      out[d] = tat
    else
      out[d] = fmt('1 %d -1 -1', t - now) .. marks
    end
  end
  k = k + nl
  a = a + 2 * nl
end

-- Write every charged key once, by the expiry rule of take_gcra.lua: the
-- value's second decides the expiry; it is kept while the value stays in
-- the second it was in.
for _, key in ipairs(changed) do
  local o, tat = old[key], cur[key]
  if slack > 0 then
    redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
  elseif o > 0 and floor(o / G) == floor(tat / G) then
    redis.call('INCRBY', key, fmt('%d', tat - o))
  else
    redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / G) + 2) * 1000))
  end
end
return out
