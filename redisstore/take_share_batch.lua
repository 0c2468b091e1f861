-- take_share_batch.lua: take_share.lua for several demands of one scope
-- at once, decided in the order given, as if each were its own call of
-- take_share.lua at the same instant: the same decisions and the same
-- state left (TestTakeShareBatchMatchesTakeShare checks both, decision by
-- decision and key by key). Take sends such a batch when demands with a
-- tenant arrive while earlier calls of their scope are in flight
-- (WithBatching, batch.go, share_batch.go): one round trip and one TIME
-- for the batch, one read of each GCRA key and of each tenant's state,
-- and one write of each at the end, instead of all of them per demand.
--
-- Units as in prologue.lua.
--
-- KEYS: for each demand in order that is sent in full (below), its pause
-- key if any, its limits' keys (one or two), then its shared limit's three
-- fair-share keys: shares, claims, ends (share.lua). A key may appear for
-- several demands. All share one hash tag {scope}; no other key is
-- touched.
--
-- ARGV[1], ARGV[2]  the clock and "" (prologue.lua)
-- ARGV[3]  the number of demands; -N when all N are the same as the
--          first, which alone is sent (no "=" for the others)
-- then per demand: P (pause keys, 0 or 1), G (GCRA limits, 1 or 2),
--          MaxWait (at most T/2, as take_share.lua's ARGV[3]), G pairs
--          charge, allowance (take_share.lua's), then the shared limit's
--          entry, take_share.lua's seven: its index (1-based), the
--          tenant, unit, ahead, window, claim, wait; or "=" alone for a
--          demand the same as the one before it, or "=" followed by a
--          tenant for one that differs from it only in the tenant of its
--          shared limit: neither has keys of its own (demands of a batch
--          are mostly alike, and each key or argument costs Redis about
--          1100 instructions)
--
-- Reply: a table: the clock (now), then per demand take_share.lua's
-- reply to it, except that a demand of one limit granted at the clock
-- gets its limit's new arrival time alone, an integer, as in
-- take_batch.lua's reply (and a demand of two limits always a string): a
-- string costs Redis about 8k instructions, an integer in the table
-- about 0.6k, and take_share.lua's integer reply, for idle buckets only,
-- left most demands of a batch a string.
--
-- State. values holds every GCRA and pause key read so far (whole µs, 0
-- when there is none) as the demands decided so far left it, stored the
-- value Redis had; a limit key whose value changed is written back once
-- at the end by gcra_write.lua's rule: a run of writes of arrival times
-- that never decrease leaves the value and expiry that one write of the
-- last does. states holds, per shares key, what take_share.lua reads of
-- it: the active tenants' count for a window (ZCOUNT, once; a tenant
-- that becomes active adds one), in marks the claims' lapse ('#c', once)
-- and per tenant its last demand and share clock (ZMSCORE, once per
-- tenant), in dirty the members written; those are written back with
-- one ZADD per key at the end, then its expiry (share_expire.lua's
-- rule, its latest instant). Pruning (ZREMRANGEBYSCORE) runs where
-- take_share.lua runs it: it drops only members that are no longer
-- after now, which a write of this batch never is, so the ZADD at the
-- end leaves what the writes of each demand would have. Claims are read
-- and written at once, as in take_share.lua: they matter only while one
-- is live.

local demands, same = tonumber(ARGV[3]), false
if demands < 0 then demands, same = -demands, true end

-- Demands all alike (each after the first "=", so one tenant) while no
-- claim on the counter is live: decided in straight lines, without the
-- tables and closures below (they cost a batch of two such demands about
-- 50k instructions), with the same replies and writes. A demand that
-- would leave a claim (refused within its wait) sends the batch to the
-- general path below, before anything is written; so does a live claim.
-- The general path then starts from what the straight lines read rather
-- than read it again (under a saturated fair share claims are live most
-- of the time): early, the shares key whose marks ZMSCORE read (got),
-- earlyRead the keys' values and earlyCount the active tenants' count
-- for the window earlyWindow, once read.
-- TestTakeShareBatchMatchesTakeShare's "alike" runs check both.
local early, earlyGot, earlyRead, earlyCount, earlyWindow
local straight = ARGV[5] == '1' or ARGV[5] == '2'
local g = ARGV[5] == '2' and 2 or 1
local e = 7 + 2 * g -- the share's first argument
for a = e + 7, same and 0 or e + 5 + demands do
  if ARGV[a] ~= '=' then
    straight = false
    break
  end
end
if straight then
  local k = ARGV[4] == '1' and 2 or 1 -- the first limit's key
  local k1, k2, key = KEYS[k], nil, KEYS[k + g]
  if g == 2 then k2 = KEYS[k + 1] end
  local tenant, window = ARGV[e + 1], ARGV[e + 4] + 0
  local active, vclock = 'a' .. tenant, 'v' .. tenant
  -- got: the tenant's marks; read, count: the keys' values and the
  -- active tenants' count, once read (for early).
  local got, read, count
  if k1 ~= k2 then got = redis.call('ZMSCORE', key, active, vclock, '#c') end
  if got and (not got[3] or -got[3] <= now) then
    local pausedUntil, pause, pauseEnd = now, -1, 0
    if k == 2 then
      pauseEnd = tonumber(redis.call('GET', KEYS[1])) or 0
      if pauseEnd > now then pausedUntil, pause = pauseEnd, 0 end
    end
    local old1, c1, r1 = tonumber(redis.call('GET', k1)) or 0, ARGV[7] + 0, ARGV[8] + 0
    local old2, c2, r2 = 0, 0, 0
    if k2 then old2, c2, r2 = tonumber(redis.call('GET', k2)) or 0, ARGV[9] + 0, ARGV[10] + 0 end
    local since = now - window
    if since < -1 then since = -1 end
    count = redis.call('ZCOUNT', key, fmt('(%d', since), '+inf')
    local seen, score = got[1] and got[1] + 0, got[2] and got[2] + 0
    local fresh = not seen or seen <= now - window
    local n = count
    if fresh then n = n + 1 end
    local maxWait, wait = ARGV[6] + 0, ARGV[e + 6] + 0
    local unit, ahead = ARGV[e + 2] + 0, ARGV[e + 3] + 0
    local clock = -(score or 0)
    local tat1, tat2, granted, ttl, at = old1, old2, false, nil, nil
    local replies = {now}
    for i = 2, demands + 1 do
      local instant, binding = pausedUntil, -1
      if tat1 - r1 > instant then instant, binding = tat1 - r1, 0 end
      if k2 and tat2 - r2 > instant then instant, binding = tat2 - r2, 1 end
      -- share_expire.lua's bound, from the marks before this demand
      local bound = seen and seen + window
      if score and (not bound or clock > bound) then bound = clock end
      local need = now + window
      if instant > now and instant - now > maxWait then
        if instant - now <= wait then
          -- It would leave a claim: the general path.
          straight = false
          read = {[k1] = old1}
          if k2 then read[k2] = old2 end
          if k == 2 then read[KEYS[1]] = pauseEnd end
          break
        end
        replies[i] = fmt('0 %d %d %d', instant - now, binding, pause)
      else
        if tat1 < instant then tat1 = instant end
        tat1 = tat1 + c1
        if k2 then
          if tat2 < instant then tat2 = instant end
          tat2 = tat2 + c2
        end
        -- #include share_step.lua
        score, granted = -clock, true
        if clock > need then need = clock end
        if instant == now and not k2 then
          replies[i] = tat1
        elseif not k2 then
          replies[i] = fmt('1 %d -1 -1 %d -1 %d', instant - now, now, tat1)
        else
          replies[i] = fmt('1 %d -1 -1 %d -1 %d %d', instant - now, now, tat1, tat2)
        end
      end
      seen = now
      -- The key's expiry (share_expire.lua's rule), sent at the end.
      if slack > 0 then
        local t = math.ceil((need - now) / 1000) + slack
        if not ttl or t > ttl then ttl = t end
      elseif not bound or need - need % GRID > bound - bound % GRID then
        local a = (need - need % GRID) / 1000 + 2000
        if not at or a > at then at = a end
      end
    end
    if straight then
      if tat1 ~= old1 then
        local key, old, tat = k1, old1, tat1
        -- #include gcra_write.lua
      end
      if k2 and tat2 ~= old2 then
        local key, old, tat = k2, old2, tat2
        -- #include gcra_write.lua
      end
      -- Newly active: drop what no longer matters (share.lua).
      if fresh then redis.call('ZREMRANGEBYSCORE', key, fmt('%d', -now), fmt('%d', now - window)) end
      if granted then
        redis.call('ZADD', key, fmt('%d', now), active, fmt('%d', -clock), vclock)
      else
        redis.call('ZADD', key, fmt('%d', now), active)
      end
      if ttl then
        if redis.call('PEXPIRE', key, ttl, 'GT') == 0 then redis.call('PEXPIRE', key, ttl, 'NX') end
      elseif at then
        local a = fmt('%d', at)
        if redis.call('PEXPIREAT', key, a, 'GT') == 0 then redis.call('PEXPIREAT', key, a, 'NX') end
      end
      return replies
    end
  end
  if got then
    -- The general path takes over (a live claim, or one to leave).
    early, earlyGot, earlyRead, earlyCount, earlyWindow = key, got, read, count, count and window
  end
end
local values, stored = {}, {} -- GCRA and pause keys
local states = {} -- shares keys
local replies = {now}
-- What the straight lines read, unchanged since (see early).
for key, v in pairs(earlyRead or {}) do values[key], stored[key] = v, v end

-- value returns the value of the GCRA or pause key key as decided so far.
local function value(key)
  local v = values[key]
  if v == nil then
    v = tonumber(redis.call('GET', key)) or 0
    values[key], stored[key] = v, v
  end
  return v
end

-- flushMarks writes the marks of shares key key (its state st) that
-- this batch changed: st.marks holds each mark read or written by its
-- member ('a'..tenant, 'v'..tenant, '#c'), as its score (false: none),
-- st.dirty the members written.
local function flushMarks(key, st)
  local dirty, marks = st.dirty, st.marks
  local m1 = next(dirty)
  if not m1 then return end
  local m2 = next(dirty, m1)
  if not m2 then
    redis.call('ZADD', key, fmt('%d', marks[m1]), m1)
    dirty[m1] = nil
  elseif not next(dirty, m2) then
    -- One tenant's two marks, the common case: no table.
    redis.call('ZADD', key, fmt('%d', marks[m1]), m1, fmt('%d', marks[m2]), m2)
    dirty[m1], dirty[m2] = nil, nil
  else
    local zadd, n = {}, 0
    for member in pairs(dirty) do
      zadd[n + 1], zadd[n + 2], n = fmt('%d', marks[member]), member, n + 2
      dirty[member] = nil
    end
    redis.call('ZADD', key, unpack(zadd))
  end
end

-- The demand being decided: its arguments stay for "=" and "=tenant".
local pauseKey, k1, c1, r1, k2, c2, r2, maxWait
local index, tenant, unit, ahead, window, claimSpan, wait, key, claims, ends, active, vclock
local arg, k = 4, 1
for i = 1, demands do
  local a = ARGV[arg]
  if same and i > 1 then
    -- the first again (-N): no argument of its own
  elseif a == '=' then
    arg = arg + 1
  elseif string.byte(a) == 61 then -- '=' and a tenant
    tenant = string.sub(a, 2)
    active, vclock = 'a' .. tenant, 'v' .. tenant
    arg = arg + 1
  else
    local g = tonumber(ARGV[arg + 1])
    maxWait, pauseKey = tonumber(ARGV[arg + 2]), nil
    if a == '1' then pauseKey, k = KEYS[k], k + 1 end
    k1, c1, r1, k2 = KEYS[k], tonumber(ARGV[arg + 3]), tonumber(ARGV[arg + 4]), nil
    if g == 2 then k2, c2, r2 = KEYS[k + 1], tonumber(ARGV[arg + 5]), tonumber(ARGV[arg + 6]) end
    k = k + g
    local e = arg + 3 + 2 * g
    index, tenant, unit, ahead = tonumber(ARGV[e]), ARGV[e + 1], tonumber(ARGV[e + 2]), tonumber(ARGV[e + 3])
    window, claimSpan, wait = tonumber(ARGV[e + 4]), tonumber(ARGV[e + 5]), tonumber(ARGV[e + 6])
    key, claims, ends = KEYS[k], KEYS[k + 1], KEYS[k + 2]
    active, vclock = 'a' .. tenant, 'v' .. tenant
    k = k + 3
    arg = e + 7
  end

  -- The limits (gcra_read.lua's reading).
  local instant, pause, binding = now, -1, -1
  if pauseKey then
    local pauseEnd = value(pauseKey)
    if pauseEnd > instant then instant, pause = pauseEnd, 0 end
  end
  local old1, old2 = value(k1), 0
  local earliest = old1 - r1
  if earliest > instant then instant, binding = earliest, 0 end
  if k2 then
    old2 = value(k2)
    earliest = old2 - r2
    if earliest > instant then instant, binding = earliest, 1 end
  end

  -- The fair share (take_share.lua's).
  local st = states[key]
  if not st then
    -- (The first demand's key was read by the straight lines if early.)
    local got = earlyGot
    if key ~= early then got = redis.call('ZMSCORE', key, active, vclock, '#c') end
    st = {marks = {[active] = tonumber(got[1]) or false, [vclock] = tonumber(got[2]) or false, ['#c'] = tonumber(got[3]) or false}, dirty = {}}
    if key == early then st.count, st.window = earlyCount, earlyWindow end
    states[key] = st
  end
  local marks = st.marks
  local seen = marks[active]
  if seen == nil then
    local got = redis.call('ZMSCORE', key, active, vclock)
    seen = tonumber(got[1]) or false
    marks[active], marks[vclock] = seen, tonumber(got[2]) or false
  end
  if st.window ~= window then
    -- The active tenants for this window: Redis's, once its marks are
    -- written (a second window on one key is rare).
    flushMarks(key, st)
    local since = now - window
    if since < -1 then since = -1 end
    st.count, st.window = redis.call('ZCOUNT', key, fmt('(%d', since), '+inf'), window
  end
  local n = st.count
  if not seen or seen <= now - window then
    n = n + 1
    st.count = n
    redis.call('ZREMRANGEBYSCORE', key, fmt('%d', -now), fmt('%d', now - window))
  end
  local score, lapse = marks[vclock], -(marks['#c'] or 0)
  local clock = -(score or 0)
  local bound = seen and seen + window -- share_expire.lua's
  if score and (not bound or clock > bound) then bound = clock end
  local place, held = clock, nil
  if place < now then place = now end
  marks[active], st.dirty[active] = now, true
  if lapse > now then
    local claim = claimSpan
    -- #include share_held.lua
  end

  local need
  if held or (instant > now and instant - now > maxWait) then
    -- Refused (take_share.lua's).
    local refused = instant
    if held and held >= refused then refused, binding, pause = held, index - 1, -1 end
    need = now + window
    if refused - now <= wait then
      local span = claimSpan
      -- #include share_claim.lua
      if refused + span > lapse then
        lapse = refused + span
        marks['#c'], st.dirty['#c'] = -lapse, true
        if lapse > need then need = lapse end
      end
    end
    replies[i + 1] = fmt('0 %d %d %d', refused - now, binding, pause)
  else
    -- Granted: charge the limits, then the clock.
    local tat1 = old1
    if tat1 < instant then tat1 = instant end
    tat1 = tat1 + c1
    values[k1] = tat1
    local tat2
    if k2 then
      tat2 = old2
      if tat2 < instant then tat2 = instant end
      tat2 = tat2 + c2
      values[k2] = tat2
    end
    -- #include share_step.lua
    marks[vclock], st.dirty[vclock] = -clock, true
    need = now + window
    if clock > need then need = clock end
    if lapse > now then
      redis.call('ZREM', claims, tenant)
      redis.call('ZREM', ends, tenant)
    end
    if instant == now and not k2 then
      replies[i + 1] = tat1
    elseif not k2 then
      replies[i + 1] = fmt('1 %d -1 -1 %d -1 %d', instant - now, now, tat1)
    else
      replies[i + 1] = fmt('1 %d -1 -1 %d -1 %d %d', instant - now, now, tat1, tat2)
    end
  end
  -- The key's expiry (share_expire.lua's rule), sent at the end.
  if slack > 0 then
    local ttl = math.ceil((need - now) / 1000) + slack
    if not st.ttl or ttl > st.ttl then st.ttl = ttl end
  elseif not bound or need - need % GRID > bound - bound % GRID then
    -- x - x % GRID is floor(x / GRID) * GRID without a call of
    -- math.floor, a C function (take_share.lua).
    local at = (need - need % GRID) / 1000 + 2000
    if not st.at or at > st.at then st.at = at end
  end
end

-- Write back: the limits' arrival times, then each shares key's marks and
-- its expiry.
for key, old in pairs(stored) do
  local tat = values[key]
  if tat ~= old then
    -- #include gcra_write.lua
  end
end
for key, st in pairs(states) do
  flushMarks(key, st)
  if st.ttl then
    if redis.call('PEXPIRE', key, st.ttl, 'GT') == 0 then redis.call('PEXPIRE', key, st.ttl, 'NX') end
  elseif st.at then
    local at = fmt('%d', st.at)
    if redis.call('PEXPIREAT', key, at, 'GT') == 0 then redis.call('PEXPIREAT', key, at, 'NX') end
  end
end
return replies
