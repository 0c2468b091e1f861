-- take_batch.lua: take_gcra.lua for several demands of one scope at once,
-- decided in the order given, as if each were its own call at the same
-- instant. Take sends a batch when demands of one scope arrive while an
-- earlier call of that scope is in flight (WithBatching, batch.go): one
-- round trip, one TIME, one GET and one write per key however many
-- demands share it, instead of all of them per demand.
--
-- Units as in prologue.lua.
--
-- KEYS: for each demand in order, its pause keys, then its limit keys (one
-- per limit). A key may appear for several demands. All share one hash
-- tag {scope}; no other key is touched.
--
-- ARGV[1], ARGV[2]  the clock and "" (prologue.lua)
-- ARGV[3]  the number of demands
-- then per demand: P (pause keys), L (limits), MaxWait, then L pairs
--          charge = cost*T, allowance = Burst*T - cost*T (T = ceil(Per/Rate))
--
-- Reply: a table with one entry per demand, in take_gcra.lua's format: a
-- string "1 delay -1 -1 now -1 TAT..." when granted, "0 delay limit
-- pause" when refused.

-- current holds every key read so far: its value as the demands decided
-- so far left it. stored holds the value Redis had, and changed lists the
-- limit keys to write back, once each, at the end.
local current, stored, changed = {}, {}, {}
local function get(key)
  local value = current[key]
  if value == nil then
    value = tonumber(redis.call('GET', key)) or 0
    current[key], stored[key] = value, value
  end
  return value
end

local replies = {}
local nextKey, nextArg = 1, 4 -- the next demand's first key and argument
for demand = 1, tonumber(ARGV[3]) do
  local pauses, limits = tonumber(ARGV[nextArg]), tonumber(ARGV[nextArg + 1])
  local maxWait = ARGV[nextArg + 2]
  nextArg = nextArg + 3
  local instant, pause, binding = now, -1, -1
  for i = 0, pauses - 1 do
    local pauseEnd = get(KEYS[nextKey + i])
    if pauseEnd > instant then instant, pause = pauseEnd, i end
  end
  nextKey = nextKey + pauses
  for i = 0, limits - 1 do
    local earliest = get(KEYS[nextKey + i]) - ARGV[nextArg + 2 * i + 1]
    if earliest > instant then instant, binding = earliest, i end
  end
  if instant > now and instant - now > tonumber(maxWait) then
    replies[demand] = fmt('0 %d %d %d', instant - now, binding, pause)
  else
    local marks, tat = ''
    for i = 0, limits - 1 do
      local key = KEYS[nextKey + i]
      tat = current[key]
      if tat < instant then tat = instant end
      tat = tat + ARGV[nextArg + 2 * i]
      if not changed[key] then
        changed[#changed + 1] = key
        changed[key] = true
      end
      current[key] = tat
      marks = marks .. ' ' .. fmt('%d', tat)
    end
    replies[demand] = fmt('1 %d -1 -1 %d -1', instant - now, now) .. marks
  end
  nextKey = nextKey + limits
  nextArg = nextArg + 2 * limits
end

-- Write every charged key once, by the expiry rule of take_gcra.lua: the
-- value's second decides the expiry; it is kept while the value stays in
-- the second it was in.
for _, key in ipairs(changed) do
  local old, tat = stored[key], current[key]
  if slack > 0 then
    redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
  elseif old > 0 and floor(old / GRID) == floor(tat / GRID) then
    redis.call('INCRBY', key, fmt('%d', tat - old))
  else
    redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
  end
end
return replies
