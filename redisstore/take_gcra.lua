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
-- ARGV[2]  "P M": P pause keys, and remember the reply for M ms (0: not);
--          "R" when go-redis sends the call again (ReplayDetect, resend.go):
--          refused with an error beginning "RESENT", nothing decided
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
local fmt, floor = string.format, math.floor

-- Expiry rule, shared by every script that writes a GCRA key: a key
-- whose value (its arrival time) lies in second n of Redis's clock expires
-- at the end of second n + 1, i.e. at (floor(tat/G) + 2) * G µs. While a
-- value stays within one second, as it does under load, its expiry need
-- not be rewritten: the value moves by an INCRBY of the difference, which
-- keeps the TTL and costs Redis less than SET KEEPTTL (the number is
-- changed in place and the reply is an integer, not a status table), let
-- alone SET PX. A key thus outlives its arrival time by 1 to 2 s. Test
-- clocks (slack > 0) keep SET PX. (The rule is inlined: a Lua closure per
-- call costs more than it.)
local G = 1000000

local mode = ARGV[2]
local np, rttl = 0, 0
if mode == '1 0' then
  np = 1
elseif mode ~= '0 0' then
  if mode == 'R' then
    return redis.error_reply('RESENT: call sent again, not decided again')
  end
  np, rttl = string.match(mode, '^(%d+) (%d+)$')
  np, rttl = tonumber(np), tonumber(rttl)
end
local nk = #KEYS
if rttl > 0 then
  local prev = redis.call('GET', KEYS[nk])
  if prev then
    -- A retry of a call whose reply was lost: answer as the first run
    -- did. The stored reply is "t TAT..." (take.lua's format).
    local t, marks = string.match(prev, '^(%d+)(.*)$')
    t = tonumber(t)
    local delay = 0
    if t > now then delay = t - now end
    return fmt('1 %d -1 -1', delay) .. marks
  end
end

if nl <= 2 and np <= 1 then
  -- At most one pause key and one or two limits: the common cases (a
  -- transport's demand has its scope's pause key), in straight lines
  -- without tables.
  local t, pause, k = now, -1, 1
  if np == 1 then
    local p = tonumber(redis.call('GET', KEYS[1]))
    if p and p > t then t, pause = p, 0 end
    k = 2
  end
  local old1 = tonumber(redis.call('GET', KEYS[k])) or 0
  local old2, binding = 0, -1
  local e = old1 - ARGV[4]
  if e > t then t, binding = e, 0 end
  if nl == 2 then
    old2 = tonumber(redis.call('GET', KEYS[k + 1])) or 0
    e = old2 - ARGV[6]
    if e > t then t, binding = e, 1 end
  end
  -- MaxWait is read only when there is a wait (one number less to parse).
  if t > now and t - now > tonumber(ARGV[1]) then
    return fmt('0 %d %d %d', t - now, binding, pause)
  end
  local tat1, tat2
  for i = 1, nl do
    local old = old1
    if i == 2 then old = old2 end
    local tat = old
    if tat < t then tat = t end
    tat = tat + ARGV[1 + 2 * i]
    local key = KEYS[k + i - 1]
    if slack > 0 then
      redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
    elseif old > 0 and floor(old / G) == floor(tat / G) then
      redis.call('INCRBY', key, fmt('%d', tat - old))
    else
      redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / G) + 2) * 1000))
    end
    if i == 1 then tat1 = tat else tat2 = tat end
  end
  if rttl == 0 and t == now and nl == 1 then return tat1 end
  local marks
  if nl == 2 then marks = fmt('%d %d', tat1, tat2) else marks = fmt('%d', tat1) end
  if rttl > 0 then
    redis.call('SET', KEYS[nk], fmt('%d ', t) .. marks, 'PX', rttl)
    if t == now and nl == 1 then return tat1 end
  end
  return fmt('1 %d -1 -1 ', t - now) .. marks
end

-- put writes a limit's new arrival time tat over old (0: none), by the
-- expiry rule above.
local function put(key, old, tat)
  if slack > 0 then
    redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
  elseif old > 0 and floor(old / G) == floor(tat / G) then
    redis.call('INCRBY', key, fmt('%d', tat - old))
  else
    redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / G) + 2) * 1000))
  end
end

-- One read for every pause and limit key.
local v = redis.call('MGET', unpack(KEYS, 1, np + nl))

-- With GCRA only, take.lua's fixpoint is one pass: a limit's earliest
-- instant, TAT - b, does not depend on t. The first of equals binds.
local t, pause, binding = now, -1, -1
for i = 1, np do
  local p = tonumber(v[i])
  if p and p > t then t, pause = p, i - 1 end
end
local olds = {}
for i = 1, nl do
  local old = tonumber(v[np + i]) or 0
  olds[i] = old
  local e = old - ARGV[2 + 2 * i]
  if e > t then t, binding = e, i - 1 end
end
if t > now and t - now > tonumber(ARGV[1]) then
  return fmt('0 %d %d %d', t - now, binding, pause)
end

-- Charge every limit at t.
local marks = ''
for i = 1, nl do
  local tat = olds[i]
  if tat < t then tat = t end
  tat = tat + ARGV[1 + 2 * i]
  put(KEYS[np + i], olds[i], tat)
  marks = marks .. ' ' .. fmt('%d', tat)
end
if rttl > 0 then
  redis.call('SET', KEYS[nk], fmt('%d', t) .. marks, 'PX', rttl)
end
return fmt('1 %d -1 -1', t - now) .. marks
