-- take_gcra.lua: take.lua for the common case, a demand whose limits are
-- all GCRA. It makes the same decision, charges the same keys with the
-- same values and TTLs, and remembers replies under the same replay key in
-- the same format; Take picks it when every limit of the demand is GCRA.
-- It is kept apart so that take.lua stays general and this one stays
-- short: Redis runs scripts on its only thread, and every redis.call, every
-- number parsed or formatted and every table (a table reply costs Redis
-- more than its SET) shows in throughput. A decision is TIME, one read of
-- every key, and one SET PX per limit when granted.
--
-- Units: integer microseconds of Redis's clock, as in take.lua (values stay
-- below 2^53, so doubles are exact; '%d' formats what goes back to Redis).
-- Each argument costs Redis about as much as a few lines of Lua, so the
-- layout below sends as few as it can.
--
-- KEYS: the demand's pause keys, then one key per limit, then the key that
-- remembers this decision's reply when replies are remembered. All share
-- one hash tag {scope}; no other key is touched.
--
-- ARGV[1]  MaxWait
-- ARGV[2]  "" when there is no pause key and no reply to remember (the
--          common case: one argument fewer to send and parse), else
--          "P M": P pause keys, and remember the reply for M ms (0: not)
-- then 2 per limit: a = cost*T, b = Burst*T - cost*T (T = ceil(Per/Rate))
-- then, only from tests, the current instant to use instead of TIME; so
--          #ARGV is odd exactly when it is given.
--
-- Reply: an integer when granted at once on one limit: the arrival time
-- (TAT) it set. Otherwise a string of integers, "1 delay -1 -1 TAT..."
-- (one TAT per limit) when granted, "0 delay limit pause" when refused,
-- with the binding limit and pause as 0-based indexes, -1 for none.

local na = #ARGV
local now, slack
if na % 2 == 0 then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
  slack = 0
else
  -- A client-given instant need not advance with Redis's clock, so keys
  -- get an hour of extra life (tests only), as in take.lua.
  now = tonumber(ARGV[na])
  slack = 3600000
  na = na - 1
end
local nl = na / 2 - 1
local fmt = string.format

if nl == 1 and ARGV[2] == '' then
  -- One limit, no pause, no replay key: the common case, without tables.
  local tat = tonumber(redis.call('GET', KEYS[1])) or 0
  local t = tat - ARGV[4]
  if t <= now then
    t = now
  elseif t - now > tonumber(ARGV[1]) then
    return fmt('0 %d 0 -1', t - now)
  end
  if tat < t then tat = t end
  tat = tat + ARGV[3]
  redis.call('SET', KEYS[1], fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
  if t == now then return tat end
  return fmt('1 %d -1 -1 %d', t - now, tat)
end

local np, rttl = 0, '0'
if ARGV[2] ~= '' then
  np, rttl = string.match(ARGV[2], '^(%d+) (%d+)$')
  np = tonumber(np)
end
local replay = rttl ~= '0'

-- One read for every key: pauses, limits and the replay key.
local nk = #KEYS
local v = redis.call('MGET', unpack(KEYS))
if replay and v[nk] then
  -- A retry of a call whose reply was lost: answer as the first run did.
  -- The stored reply is "t TAT..." (take.lua's format).
  local t, marks = string.match(v[nk], '^(%d+)(.*)$')
  t = tonumber(t)
  local delay = 0
  if t > now then delay = t - now end
  return fmt('1 %d -1 -1', delay) .. marks
end

-- With GCRA only, take.lua's fixpoint is one pass: a limit's earliest
-- instant, TAT - b, does not depend on t. The first of equals binds.
local t, pause, binding = now, -1, -1
for i = 1, np do
  local p = tonumber(v[i])
  if p and p > t then t, pause = p, i - 1 end
end
local tats = {}
for i = 1, nl do
  local tat = tonumber(v[np + i]) or 0
  tats[i] = tat
  local e = tat - ARGV[2 + 2 * i]
  if e > t then t, binding = e, i - 1 end
end
if t - now > tonumber(ARGV[1]) then
  return fmt('0 %d %d %d', t - now, binding, pause)
end

-- Charge every limit at t; each key lives until its new arrival time
-- (ms, rounded up), after which it reads as a fresh bucket.
local marks = ''
for i = 1, nl do
  local tat = tats[i]
  if tat < t then tat = t end
  tat = tat + ARGV[1 + 2 * i]
  local s = fmt('%d', tat)
  redis.call('SET', KEYS[np + i], s, 'PX', math.ceil((tat - now) / 1000) + slack)
  marks = marks .. ' ' .. s
end
if replay then
  redis.call('SET', KEYS[nk], fmt('%d', t) .. marks, 'PX', rttl)
end
return fmt('1 %d -1 -1', t - now) .. marks
