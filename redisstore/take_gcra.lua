-- take_gcra.lua: take.lua for the common case, a demand whose limits are
-- all GCRA. It makes the same decision, charges the same keys with the
-- same values and TTLs, and remembers replies under the same replay key in
-- the same format; Take picks it when every limit of the demand is GCRA.
-- It is kept apart so that take.lua stays general and this one stays
-- short: Redis runs scripts on its only thread, and every redis.call, every
-- number parsed or formatted and every table (a table reply costs Redis
-- more than its SET) shows in throughput. A decision is TIME, one read of
-- every key, and one write per limit when granted; a demand of one limit
-- in whole microseconds told its bucket is busy charges its key first
-- (below), so that its grant is TIME and one INCRBY.
--
-- Units as in prologue.lua. Each argument costs Redis about as much as a
-- few lines of Lua, so the layout below sends as few as it can.
--
-- KEYS: the demand's pause keys, then one key per limit, then the key that
-- remembers this decision's reply when replies are remembered. All share
-- one hash tag {scope}; no other key is touched.
--
-- ARGV[1], ARGV[2]  the clock and the decision id, "" unless replies are
--          remembered (prologue.lua)
-- ARGV[3]  MaxWait; -(MaxWait + 1) asks the one-limit path below to charge
--          the key first (busyhint.go)
-- then 2 per limit: charge = cost*T, allowance = Burst*T - cost*T
--          (T = Per/Rate), limit i's at ARGV[2 + 2*i], ARGV[3 + 2*i]
-- then, only when replies are remembered or a limit's emission interval
--          is not a whole number of microseconds: "M", remember the reply
--          for M ms (0: not), or "M f" when arguments and arrival times
--          may carry fractions (below). So #ARGV is odd in the common
--          case and even when it is given, and the pause keys are the
--          keys that are neither limits nor the replay key. (Each
--          argument costs Redis about 1100 instructions, a quarter of a
--          GET: the common case sends none it can do without.)
--
-- Reply: when granted at Redis's clock on limits whose buckets had no
-- arrival time ahead of it (no wait, no pause, no fraction, reply not
-- remembered), the integer TAT of the first limit: it is the clock plus
-- that limit's charge, which Go knows, so the clock and every other TAT
-- follow from it (formatting two numbers more costs Redis about 5000
-- instructions). Otherwise a string of integers, "1 delay -1 -1 now -1
-- TAT..." (the clock, and one TAT per limit, as stored: "us" or
-- "us:frac") when granted, "0 delay limit pause" when refused, with the
-- binding limit and pause as 0-based indexes, -1 for none. The -1 after
-- the clock leaves Decision.Remaining to Go, which knows Burst and T and
-- computes it from the TATs and the clock (a replay sends 0).
--
-- Exact arrival times. T = Per/Rate is seldom a whole number of
-- microseconds (3 a second is 333333 1/3 µs, 10^7 a second 0.1 µs), so
-- an arrival time is whole microseconds plus a fraction in units of
-- 1/Rate µs, stored "us:frac" (0 < frac < Rate), or "us" when the
-- fraction is 0, as it always is when Rate divides Per. Go sends each n*T
-- (internal/quotamath's Emissions: n*Per/Rate in 128 bits) the same way:
-- "q" when it is whole, else the charge as "q:r:Rate" and the allowance
-- as "q:r" (q microseconds plus r/Rate). So every value stays below 2^53
-- and exact in Lua. Such limits keep their arrival times under keys of
-- their own (G:, keys.go), and the last argument, "M f", says when a
-- demand has one: a demand of whole microseconds only runs the code it
-- ran before fractions were kept. With fractions:
--   earliest = ceil(TAT - allowance): tat - q, plus 1 if frac > r
--   charged  = max(TAT, instant) + charge, frac carried into tat at Rate
--
-- Expiry rule, shared by every script that writes a GCRA key: a key
-- whose value (its arrival time) lies in second n of Redis's clock expires
-- at the end of second n + 1, i.e. at (floor(tat/GRID) + 2) * GRID µs (tat
-- the whole microseconds). While a value stays within one second, as it
-- does under load, its expiry need not be rewritten: the value moves by
-- an INCRBY of the difference, which keeps the TTL and costs Redis less
-- than SET KEEPTTL (the number is changed in place and the reply is an
-- integer, not a status table), let alone SET PX; a value with a fraction
-- uses SET KEEPTTL. A key thus outlives its arrival time by 1 to 2 s.
-- Test clocks (slack > 0) keep SET PX. (The rule is inlined: a Lua
-- closure per call costs more than it.)

local nargs = #ARGV
local limits, replyTTL, exact = (nargs - 3) / 2, 0, true
if nargs % 2 == 0 then
  limits = (nargs - 4) / 2
  local ttl, fractions = string.match(ARGV[nargs], '^(%d+)(.*)$')
  replyTTL, exact = tonumber(ttl), fractions == ''
end
local pauses, replayKey = #KEYS - limits, nil
if replyTTL > 0 then
  pauses, replayKey = pauses - 1, KEYS[#KEYS]
  local prev = redis.call('GET', replayKey)
  if prev then
    -- A retry of a call whose reply was lost: answer as the first run
    -- did. The stored reply is "instant TAT..." (take.lua's format).
    local granted, marks = string.match(prev, '^(%d+)(.*)$')
    local delay = 0
    if tonumber(granted) > now then delay = granted - now end
    return fmt('1 %d -1 -1 %d 0', delay, now) .. marks
  end
end

if exact and limits == 1 and pauses <= 1 and replyTTL == 0 then
  -- One limit in whole microseconds, at most one pause key, no reply to
  -- remember: a Transport's demand, in straight lines, in one of two
  -- orders that decide alike. Told its bucket is busy (its TAT at or
  -- after the instant, as while the limit binds) and the demand will be
  -- granted (MaxWait sent as -(MaxWait + 1); busyhint.go), it charges
  -- the key first: INCRBY's reply less the charge is the TAT before it,
  -- so the grant is one command where a GET and a write were two, and a
  -- wrong guess is undone: an idle bucket's TAT is then set to instant +
  -- charge by a second write, and a refusal takes the charge back
  -- (DECRBY keeps the TTL; a key the INCRBY made is deleted). Otherwise
  -- it reads first, and writes only a grant. Redis runs the script
  -- alone, so no other call sees a guess: the decision, the value and
  -- its expiry are those of the paths below (BENCHMARKS.md, "A busy
  -- bucket's grant in one command").
  local instant, pause, key = now, -1, KEYS[1]
  if pauses == 1 then
    local pauseEnd = redis.call('GET', KEYS[1])
    if pauseEnd and pauseEnd + 0 > instant then instant, pause = pauseEnd + 0, 0 end
    key = KEYS[2]
  end
  -- The charge as sent and as a number (Lua's coercion, once); have: the
  -- key's value once charged.
  local charge, have, old = ARGV[4], nil, nil
  local c, first = charge + 0, ARGV[3] < '0'
  if first then
    have = redis.call('INCRBY', key, charge)
    old = have - c
  else
    old = (redis.call('GET', key) or 0) + 0
  end
  local binding = -1
  if old > instant then
    local earliest = old - ARGV[5]
    if earliest > instant then instant, binding = earliest, 0 end
  end
  local wait = 0
  if instant > now then
    wait = ARGV[3] + 0
    if first then wait = -wait - 1 end
  end
  if instant - now > wait then
    if have then
      if old > 0 then
        redis.call('DECRBY', key, charge)
      else
        redis.call('DEL', key)
      end
    end
    return fmt('0 %d %d %d', instant - now, binding, pause)
  end
  -- TAT' = max(TAT, instant) + charge, written by the expiry rule above.
  local set = old + c
  if old < instant then set = instant + c end
  have = have or old
  if slack > 0 then
    redis.call('SET', key, fmt('%d', set), 'PX', math.ceil((set - now) / 1000) + slack)
  elseif old > 0 and old - old % GRID == set - set % GRID then
    if set ~= have then redis.call('INCRBY', key, fmt('%d', set - have)) end
  elseif set == have then
    redis.call('PEXPIREAT', key, fmt('%d', (set - set % GRID) / 1000 + 2000))
  else
    redis.call('SET', key, fmt('%d', set), 'PXAT', fmt('%d', (set - set % GRID) / 1000 + 2000))
  end
  if instant == now and old <= now then return set end -- idle: TAT = now + charge
  return fmt('1 %d -1 -1 %d -1 %d', instant - now, now, set)
end

if exact and limits <= 2 and pauses <= 1 then
  -- At most one pause key and one or two limits, in whole microseconds:
  -- the common cases (a transport's demand has its scope's pause key), in
  -- straight lines without tables.
  -- #include gcra_read.lua
  -- MaxWait is read only when there is a wait (one number less to parse).
  if instant > now and instant - now > tonumber(ARGV[3]) then
    return fmt('0 %d %d %d', instant - now, binding, pause)
  end
  -- #include gcra_charge.lua
  if replyTTL == 0 and instant == now and old1 <= now and old2 <= now then
    -- Every bucket was idle: TAT = now + charge (the reply above).
    return tat1
  end
  if replyTTL == 0 and limits == 1 then return fmt('1 %d -1 -1 %d -1 %d', instant - now, now, tat1) end
  local marks
  if limits == 2 then marks = fmt('%d %d', tat1, tat2) else marks = fmt('%d', tat1) end
  if replyTTL > 0 then
    redis.call('SET', replayKey, fmt('%d ', instant) .. marks, 'PX', replyTTL)
  end
  return fmt('1 %d -1 -1 %d -1 ', instant - now, now) .. marks
end

if limits <= 2 and pauses <= 1 then
  -- The same with fractions: the arrival times "us:frac" and the
  -- arguments "q:r" parsed (3 a second, 900 a minute).
  local instant, pause, first = now, -1, 1
  if pauses == 1 then
    local pauseEnd = tonumber(redis.call('GET', KEYS[1]))
    if pauseEnd and pauseEnd > instant then instant, pause = pauseEnd, 0 end
    first = 2
  end
  local raw = redis.call('GET', KEYS[first])
  local old1, frac1 = tonumber(raw), 0
  if not old1 then
    old1 = 0
    if raw then
      local us, frac = string.match(raw, '^(%d+):(%d+)$')
      old1, frac1 = tonumber(us) or 0, tonumber(frac) or 0
    end
  end
  local old2, frac2, binding = 0, 0, -1
  local room, roomFrac = tonumber(ARGV[5]), 0
  if not room then
    local q, r = string.match(ARGV[5], '^(%d+):(%d+)$')
    room, roomFrac = tonumber(q), tonumber(r)
  end
  local earliest = old1 - room
  if frac1 > roomFrac then earliest = earliest + 1 end
  if earliest > instant then instant, binding = earliest, 0 end
  if limits == 2 then
    raw = redis.call('GET', KEYS[first + 1])
    old2 = tonumber(raw)
    if not old2 then
      old2 = 0
      if raw then
        local us, frac = string.match(raw, '^(%d+):(%d+)$')
        old2, frac2 = tonumber(us) or 0, tonumber(frac) or 0
      end
    end
    room, roomFrac = tonumber(ARGV[7]), 0
    if not room then
      local q, r = string.match(ARGV[7], '^(%d+):(%d+)$')
      room, roomFrac = tonumber(q), tonumber(r)
    end
    earliest = old2 - room
    if frac2 > roomFrac then earliest = earliest + 1 end
    if earliest > instant then instant, binding = earliest, 1 end
  end
  -- MaxWait is read only when there is a wait (one number less to parse).
  if instant > now and instant - now > tonumber(ARGV[3]) then
    return fmt('0 %d %d %d', instant - now, binding, pause)
  end
  local tat1, tat2, tf1, tf2
  for i = 1, limits do
    local old, oldFrac = old1, frac1
    if i == 2 then old, oldFrac = old2, frac2 end
    local tat, frac = old, oldFrac
    if tat < instant then tat, frac = instant, 0 end
    local charge = tonumber(ARGV[2 + 2 * i])
    if charge then
      tat = tat + charge
    else
      local q, r, rate = string.match(ARGV[2 + 2 * i], '^(%d+):(%d+):(%d+)$')
      tat, frac = tat + q, frac + r
      if frac >= tonumber(rate) then tat, frac = tat + 1, frac - rate end
    end
    local key = KEYS[first + i - 1]
    if frac == 0 and oldFrac == 0 and slack == 0 and old > 0 and floor(old / GRID) == floor(tat / GRID) then
      redis.call('INCRBY', key, fmt('%d', tat - old))
    else
      local value = fmt('%d', tat)
      if frac > 0 then value = fmt('%d:%d', tat, frac) end
      if slack > 0 then
        redis.call('SET', key, value, 'PX', math.ceil((tat - now) / 1000) + slack)
      elseif old > 0 and floor(old / GRID) == floor(tat / GRID) then
        redis.call('SET', key, value, 'KEEPTTL')
      else
        redis.call('SET', key, value, 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
      end
    end
    if i == 1 then tat1, tf1 = tat, frac else tat2, tf2 = tat, frac end
  end
  if replyTTL == 0 and limits == 1 then
    if tf1 == 0 then return fmt('1 %d -1 -1 %d -1 %d', instant - now, now, tat1) end
    return fmt('1 %d -1 -1 %d -1 %d:%d', instant - now, now, tat1, tf1)
  end
  local marks = fmt('%d', tat1)
  if tf1 > 0 then marks = fmt('%d:%d', tat1, tf1) end
  if limits == 2 then
    if tf2 > 0 then marks = marks .. fmt(' %d:%d', tat2, tf2) else marks = marks .. fmt(' %d', tat2) end
  end
  if replyTTL > 0 then
    redis.call('SET', replayKey, fmt('%d ', instant) .. marks, 'PX', replyTTL)
  end
  return fmt('1 %d -1 -1 %d -1 ', instant - now, now) .. marks
end

-- One read for every pause and limit key.
local values = redis.call('MGET', unpack(KEYS, 1, pauses + limits))

-- With GCRA only, take.lua's fixpoint is one pass: a limit's earliest
-- instant, ceil(TAT - allowance), does not depend on the instant. The
-- first of equals binds.
local instant, pause, binding = now, -1, -1
for i = 1, pauses do
  local pauseEnd = tonumber(values[i])
  if pauseEnd and pauseEnd > instant then instant, pause = pauseEnd, i - 1 end
end
local olds, fracs = {}, nil -- fracs: the arrival times' fractions, with fractions
if not exact then fracs = {} end
for i = 1, limits do
  local raw = values[pauses + i]
  local old = tonumber(raw) or 0
  local earliest
  if exact then
    earliest = old - ARGV[3 + 2 * i]
  else
    -- earliest = ceil(TAT - allowance): tat - q, plus 1 if frac > r.
    local frac, room, roomFrac = 0, tonumber(ARGV[3 + 2 * i]), 0
    if raw and old == 0 then
      local us, f = string.match(raw, '^(%d+):(%d+)$')
      old, frac = tonumber(us) or 0, tonumber(f) or 0
    end
    if not room then
      local q, r = string.match(ARGV[3 + 2 * i], '^(%d+):(%d+)$')
      room, roomFrac = tonumber(q), tonumber(r)
    end
    fracs[i] = frac
    earliest = old - room
    if frac > roomFrac then earliest = earliest + 1 end
  end
  olds[i] = old
  if earliest > instant then instant, binding = earliest, i - 1 end
end
if instant > now and instant - now > tonumber(ARGV[3]) then
  return fmt('0 %d %d %d', instant - now, binding, pause)
end

-- Charge every limit at the instant, by the expiry rule above.
local marks = ''
for i = 1, limits do
  local key, old = KEYS[pauses + i], olds[i]
  local tat = old
  if exact then
    if tat < instant then tat = instant end
    tat = tat + ARGV[2 + 2 * i]
    -- #include gcra_write.lua
    marks = marks .. ' ' .. fmt('%d', tat)
  else
    -- TAT' = max(TAT, instant) + charge, the fraction carried at Rate.
    local oldFrac = fracs[i]
    local frac = oldFrac
    if tat < instant then tat, frac = instant, 0 end
    local charge = tonumber(ARGV[2 + 2 * i])
    if charge then
      tat = tat + charge
    else
      local q, r, rate = string.match(ARGV[2 + 2 * i], '^(%d+):(%d+):(%d+)$')
      tat, frac = tat + q, frac + r
      if frac >= tonumber(rate) then tat, frac = tat + 1, frac - rate end
    end
    local value = fmt('%d', tat)
    if frac > 0 then value = fmt('%d:%d', tat, frac) end
    if slack > 0 then
      redis.call('SET', key, value, 'PX', math.ceil((tat - now) / 1000) + slack)
    elseif old > 0 and floor(old / GRID) == floor(tat / GRID) then
      if frac == 0 and oldFrac == 0 then
        redis.call('INCRBY', key, fmt('%d', tat - old))
      else
        redis.call('SET', key, value, 'KEEPTTL')
      end
    else
      redis.call('SET', key, value, 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
    end
    marks = marks .. ' ' .. value
  end
end
if replyTTL > 0 then
  redis.call('SET', replayKey, fmt('%d', instant) .. marks, 'PX', replyTTL)
end
return fmt('1 %d -1 -1 %d -1', instant - now, now) .. marks
