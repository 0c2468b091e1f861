-- take_gcra.lua: take.lua for the common case, a demand whose limits are
-- all GCRA. It makes the same decision, charges the same keys with the
-- same values and TTLs, and remembers replies under the same replay key in
-- the same format; Take picks it when every limit of the demand is GCRA.
-- It is kept apart so that take.lua stays general and this one stays
-- short: Redis runs scripts on its only thread, and every redis.call, every
-- number parsed or formatted and every table (a table reply costs Redis
-- more than its SET) shows in throughput. A decision is TIME, one read of
-- every key, and one SET per limit when granted.
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
-- ARGV[3]  MaxWait
-- ARGV[4]  "P M": P pause keys, and remember the reply for M ms (0: not)
-- then 2 per limit: charge = cost*T, allowance = Burst*T - cost*T
--          (T = ceil(Per/Rate)), limit i's at ARGV[3 + 2*i], ARGV[4 + 2*i]
--
-- Reply: a string of integers, "1 delay -1 -1 now -1 TAT..." (the clock,
-- and one TAT per limit) when granted, "0 delay limit pause" when refused,
-- with the binding limit and pause as 0-based indexes, -1 for none. The
-- -1 after the clock leaves Decision.Remaining to Go, which knows Burst and
-- T and computes it from the TATs and the clock (a replay sends 0).
--
-- Expiry rule, shared by every script that writes a GCRA key: a key
-- whose value (its arrival time) lies in second n of Redis's clock expires
-- at the end of second n + 1, i.e. at (floor(tat/GRID) + 2) * GRID µs. While
-- a value stays within one second, as it does under load, its expiry need
-- not be rewritten: the value moves by an INCRBY of the difference, which
-- keeps the TTL and costs Redis less than SET KEEPTTL (the number is
-- changed in place and the reply is an integer, not a status table), let
-- alone SET PX. A key thus outlives its arrival time by 1 to 2 s. Test
-- clocks (slack > 0) keep SET PX. (The rule is inlined: a Lua closure per
-- call costs more than it.)

local limits = (#ARGV - 4) / 2
local mode = ARGV[4]
local pauses, replyTTL = 0, 0
if mode == '1 0' then
  pauses = 1
elseif mode ~= '0 0' then
  pauses, replyTTL = string.match(mode, '^(%d+) (%d+)$')
  pauses, replyTTL = tonumber(pauses), tonumber(replyTTL)
end
local replayKey = KEYS[#KEYS]
if replyTTL > 0 then
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

if limits <= 2 and pauses <= 1 then
  -- At most one pause key and one or two limits: the common cases (a
  -- transport's demand has its scope's pause key), in straight lines
  -- without tables.
  local instant, pause, first = now, -1, 1
  if pauses == 1 then
    local pauseEnd = tonumber(redis.call('GET', KEYS[1]))
    if pauseEnd and pauseEnd > instant then instant, pause = pauseEnd, 0 end
    first = 2
  end
  local old1 = tonumber(redis.call('GET', KEYS[first])) or 0
  local old2, binding = 0, -1
  local earliest = old1 - ARGV[6]
  if earliest > instant then instant, binding = earliest, 0 end
  if limits == 2 then
    old2 = tonumber(redis.call('GET', KEYS[first + 1])) or 0
    earliest = old2 - ARGV[8]
    if earliest > instant then instant, binding = earliest, 1 end
  end
  -- MaxWait is read only when there is a wait (one number less to parse).
  if instant > now and instant - now > tonumber(ARGV[3]) then
    return fmt('0 %d %d %d', instant - now, binding, pause)
  end
  local tat1, tat2
  for i = 1, limits do
    local old = old1
    if i == 2 then old = old2 end
    local tat = old
    if tat < instant then tat = instant end
    tat = tat + ARGV[3 + 2 * i]
    local key = KEYS[first + i - 1]
    if slack > 0 then
      redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
    elseif old > 0 and floor(old / GRID) == floor(tat / GRID) then
      redis.call('INCRBY', key, fmt('%d', tat - old))
    else
      redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
    end
    if i == 1 then tat1 = tat else tat2 = tat end
  end
  if replyTTL == 0 and limits == 1 then return fmt('1 %d -1 -1 %d -1 %d', instant - now, now, tat1) end
  local marks
  if limits == 2 then marks = fmt('%d %d', tat1, tat2) else marks = fmt('%d', tat1) end
  if replyTTL > 0 then
    redis.call('SET', replayKey, fmt('%d ', instant) .. marks, 'PX', replyTTL)
  end
  return fmt('1 %d -1 -1 %d -1 ', instant - now, now) .. marks
end

-- One read for every pause and limit key.
local values = redis.call('MGET', unpack(KEYS, 1, pauses + limits))

-- With GCRA only, take.lua's fixpoint is one pass: a limit's earliest
-- instant, TAT - allowance, does not depend on the instant. The first of
-- equals binds.
local instant, pause, binding = now, -1, -1
for i = 1, pauses do
  local pauseEnd = tonumber(values[i])
  if pauseEnd and pauseEnd > instant then instant, pause = pauseEnd, i - 1 end
end
local olds = {}
for i = 1, limits do
  local old = tonumber(values[pauses + i]) or 0
  olds[i] = old
  local earliest = old - ARGV[4 + 2 * i]
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
  if tat < instant then tat = instant end
  tat = tat + ARGV[3 + 2 * i]
  if slack > 0 then
    redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
  elseif old > 0 and floor(old / GRID) == floor(tat / GRID) then
    redis.call('INCRBY', key, fmt('%d', tat - old))
  else
    redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
  end
  marks = marks .. ' ' .. fmt('%d', tat)
end
if replyTTL > 0 then
  redis.call('SET', replayKey, fmt('%d', instant) .. marks, 'PX', replyTTL)
end
return fmt('1 %d -1 -1 %d -1', instant - now, now) .. marks
