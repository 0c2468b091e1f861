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
-- ARGV[3]  the number of demands; "N f" when the emission interval of a
--          limit is not a whole number of microseconds, so that its
--          arguments and arrival times may carry fractions (take_gcra.lua)
-- then per demand: P (pause keys), L (limits), MaxWait, then L pairs
--          charge = cost*T, allowance = Burst*T - cost*T (T = Per/Rate,
--          "q" or, with fractions, "q:r:Rate" and "q:r": take_gcra.lua);
--          or "=" alone for a demand the same as the one before it (the
--          same keys and arguments), which then has no keys of its own
--          either: demands of a batch are mostly alike, and each key or
--          argument costs Redis about 1100 instructions
--
-- Reply: a table: the clock (now), then one entry per demand. A demand of
-- one limit in whole microseconds granted at the clock gets the TAT it
-- set, an integer; any other gets take_gcra.lua's string, "1 delay -1 -1
-- now -1 TAT..." when granted (a TAT "us" or "us:frac"), "0 delay limit
-- pause" when refused. (A string costs Redis about 8k instructions per
-- demand, an integer in the table about 0.6k: in a batch of 64 demands
-- the strings were most of the work.)

-- current holds every key read so far: its value as the demands decided
-- so far left it (whole microseconds; with fractions, fraction holds the
-- rest). stored and storedFrac hold the value Redis had, and changed
-- lists the limit keys to write back, once each, at the end. A batch of
-- whole microseconds runs what it ran before fractions were kept.
local demands, exact = tonumber(ARGV[3]), true
if not demands then demands, exact = tonumber(string.match(ARGV[3], '^%d+')), false end
local current, stored, changed = {}, {}, {}
local fraction, storedFrac
if not exact then fraction, storedFrac = {}, {} end
local get -- get(key) reads key once, into current (and fraction)
if exact then
  get = function(key)
    local value = current[key]
    if value == nil then
      value = tonumber(redis.call('GET', key)) or 0
      current[key], stored[key] = value, value
    end
    return value
  end
else
  get = function(key)
    local value = current[key]
    if value == nil then
      local raw = redis.call('GET', key)
      local frac = 0
      value = tonumber(raw)
      if not value then
        value = 0
        if raw then -- "us:frac"
          local us, f = string.match(raw, '^(%d+):(%d+)$')
          value, frac = tonumber(us) or 0, tonumber(f) or 0
        end
      end
      current[key], stored[key], fraction[key], storedFrac[key] = value, value, frac, frac
    end
    return value
  end
end

local replies = {now}
local readKey, readArg = 1, 4 -- where the next demand's keys and arguments start
-- The demand's first key and first pair, and its P, L and MaxWait: a
-- demand "=" keeps the previous one's.
local keyAt, argAt, pauses, limits, maxWait
for demand = 1, demands do
  if ARGV[readArg] == '=' then
    readArg = readArg + 1
  else
    pauses, limits = tonumber(ARGV[readArg]), tonumber(ARGV[readArg + 1])
    keyAt, argAt, maxWait = readKey, readArg + 3, ARGV[readArg + 2]
    readKey, readArg = readKey + pauses + limits, argAt + 2 * limits
  end
  local nextKey, nextArg = keyAt, argAt
  local instant, pause, binding = now, -1, -1
  for i = 0, pauses - 1 do
    local pauseEnd = get(KEYS[nextKey + i])
    if pauseEnd > instant then instant, pause = pauseEnd, i end
  end
  nextKey = nextKey + pauses
  for i = 0, limits - 1 do
    local earliest
    if exact then
      earliest = get(KEYS[nextKey + i]) - ARGV[nextArg + 2 * i + 1]
    else
      -- ceil(TAT - allowance): tat - q, plus 1 if frac > r.
      local key, room, roomFrac = KEYS[nextKey + i], tonumber(ARGV[nextArg + 2 * i + 1]), 0
      if not room then
        local q, r = string.match(ARGV[nextArg + 2 * i + 1], '^(%d+):(%d+)$')
        room, roomFrac = tonumber(q), tonumber(r)
      end
      earliest = get(key) - room
      if fraction[key] > roomFrac then earliest = earliest + 1 end
    end
    if earliest > instant then instant, binding = earliest, i end
  end
  if instant > now and instant - now > tonumber(maxWait) then
    replies[demand + 1] = fmt('0 %d %d %d', instant - now, binding, pause)
  else
    local marks, tat = ''
    for i = 0, limits - 1 do
      local key = KEYS[nextKey + i]
      tat = current[key]
      if exact then
        if tat < instant then tat = instant end
        tat = tat + ARGV[nextArg + 2 * i]
        if limits > 1 or instant > now then marks = marks .. ' ' .. fmt('%d', tat) end
      else
        -- TAT' = max(TAT, instant) + charge, the fraction carried at Rate.
        local frac = fraction[key]
        if tat < instant then tat, frac = instant, 0 end
        local charge = tonumber(ARGV[nextArg + 2 * i])
        if charge then
          tat = tat + charge
        else
          local q, r, rate = string.match(ARGV[nextArg + 2 * i], '^(%d+):(%d+):(%d+)$')
          tat, frac = tat + q, frac + r
          if frac >= tonumber(rate) then tat, frac = tat + 1, frac - rate end
        end
        fraction[key] = frac
        if frac > 0 then
          marks = marks .. fmt(' %d:%d', tat, frac)
        else
          marks = marks .. ' ' .. fmt('%d', tat)
        end
      end
      if not changed[key] then
        changed[#changed + 1] = key
        changed[key] = true
      end
      current[key] = tat
    end
    if exact and limits == 1 and instant == now then
      replies[demand + 1] = tat
    else
      replies[demand + 1] = fmt('1 %d -1 -1 %d -1', instant - now, now) .. marks
    end
  end
end

-- Write every charged key once, by the expiry rule of take_gcra.lua: the
-- value's second decides the expiry; it is kept while the value stays in
-- the second it was in (INCRBY, or SET KEEPTTL for a fraction).
for _, key in ipairs(changed) do
  local old, tat = stored[key], current[key]
  if exact or fraction[key] == 0 and storedFrac[key] == 0 then
    if slack > 0 then
      redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
    elseif old > 0 and floor(old / GRID) == floor(tat / GRID) then
      redis.call('INCRBY', key, fmt('%d', tat - old))
    else
      redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
    end
  else
    local value = fmt('%d', tat)
    if fraction[key] > 0 then value = fmt('%d:%d', tat, fraction[key]) end
    if slack > 0 then
      redis.call('SET', key, value, 'PX', math.ceil((tat - now) / 1000) + slack)
    elseif old > 0 and floor(old / GRID) == floor(tat / GRID) then
      redis.call('SET', key, value, 'KEEPTTL')
    else
      redis.call('SET', key, value, 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
    end
  end
end
return replies
