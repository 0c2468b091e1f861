-- take_batch.lua: take_gcra.lua for several demands of one scope at once,
-- decided in the order given, as if each were its own call at the same
-- instant; and the one script of a demand of GCRA and Concurrency limits
-- (take.lua decides such a demand as well, in more commands: it is left
-- to replies remembered, ReplayIDs). Take sends a batch when demands of
-- one scope arrive while earlier calls of that scope are in flight
-- (WithBatching, batch.go): one round trip, one TIME, one GET and one
-- write per key however many demands share it, instead of all of them
-- per demand.
--
-- Units as in prologue.lua.
--
-- KEYS: for each demand in order, its pause keys, then its GCRA limit
-- keys, then its Concurrency limit keys (one per limit); then the
-- concurrency keys of the leases released earlier that this call carries,
-- one per run of releases of one key (ARGV[4] of them). A key may appear
-- for several demands. All share one
-- hash tag {scope}; no other key is touched.
--
-- ARGV[1], ARGV[2]  the clock and the call id (prologue.lua): "" when no
--          demand has a Concurrency limit; else unique, and demand n's
--          lease (its decision id) is "<id>.<n>"
-- ARGV[3]  the number of demands; "N f" when the emission interval of a
--          limit is not a whole number of microseconds, so that its
--          arguments and arrival times may carry fractions (take_gcra.lua);
--          -N (or "-N f") when every demand is the same as the first,
--          which alone is sent, without the "=" of the others
-- ARGV[4]  the number of runs of leases released earlier (of one key
--          each) that this call carries
-- then per demand: P (pause keys), G (GCRA limits), C (Concurrency
--          limits), MaxWait, then G pairs charge = cost*T, allowance =
--          Burst*T - cost*T (T = Per/Rate, "q" or, with fractions,
--          "q:r:Rate" and "q:r": take_gcra.lua), then C pairs: the lease
--          time (Per) and the slots (Rate less the headroom); or "=" alone
--          for a demand the same as the one before it (the same keys and
--          arguments), which then has no keys of its own either: demands
--          of a batch are mostly alike, and each key or argument costs
--          Redis about 1100 instructions
-- then per run of carried releases: the lease ids, their number and
--          the channel announcing releases of the run's key (not
--          release.lua's layout, one key and two arguments per release: a
--          batch carries about as many releases as it has demands, mostly
--          of one key, and this saves it about 2k instructions for each
--          but the first)
--
-- Concurrency limits decide as in take.lua: after the GCRA limits and
-- pauses set the instant (and MaxWait allows it), every Concurrency
-- limit needs a free slot now (fewer live leases than slots), or the
-- demand is refused until one frees (the lease that, unless released,
-- expires first); granted at the clock, it takes one slot of each, a
-- lease "<id>.<n>" that expires Per from now; granted for a later
-- instant (a reservation), it takes none (mark 0: claim.lua takes them
-- when it comes due). A key's leases that expired are pruned when it is
-- first read (ZREMRANGEBYSCORE), so ZCARD is then its live leases; the
-- leases a batch adds are written once per key at the end (one ZADD),
-- and its TTL raised to cover the latest. A call go-redis sends again is
-- refused by the prologue (ReplayDetect); with no retries it is not sent
-- again.
--
-- Carried releases: applied first, as in release.lua, by one ZREM per
-- run of releases of the same key (appendReleaseRuns), announced with
-- one PUBLISH of the number removed (the watchers of the channel wake
-- that many: lease.go). A second run removes nothing.
--
-- Reply: a table: the clock (now), then per demand either one string or
-- integers. A demand granted at the clock whose GCRA limits (at most one)
-- are in whole microseconds gets integers: the TAT its limit set (when it
-- has one), then, when it has Concurrency limits, the slots left after
-- its lease, the least over them (each lease's expiry is now + Per, which
-- Go knows). Any other gets take_gcra.lua's string, "1 delay -1 -1 now
-- remaining mark..." when granted (a mark per limit in the order above:
-- TAT "us" or "us:frac", lease expiry, 0 for a slot left unclaimed;
-- remaining, the slots left when granted at the clock with Concurrency
-- limits, else -1; Go counts them in Remaining only for a demand of
-- Concurrency limits alone, quota.Decision), "0 delay limit pause" when
-- refused (the limit as its 0-based index in the order above). (A string costs Redis about 8k
-- instructions per demand, an integer in the table about 0.6k: in a batch
-- of 64 demands the strings were most of the work.)

-- Carried releases first; a second run is a no-op. From the last run
-- back: its key is the last key not yet taken, its arguments the ids,
-- their number and the channel.
-- (Comparing a string with a constant costs less than tonumber: the
-- strings are interned.)
if ARGV[4] ~= '0' then
  local runs = ARGV[4] == '1' and 1 or tonumber(ARGV[4])
  local arg = #ARGV -- the channel of the run
  for k = #KEYS, #KEYS - runs + 1, -1 do
    local n, removed = 1, nil
    if ARGV[arg - 1] == '1' then
      removed = redis.call('ZREM', KEYS[k], ARGV[arg - 2])
    else
      n = tonumber(ARGV[arg - 1])
      removed = redis.call('ZREM', KEYS[k], unpack(ARGV, arg - 1 - n, arg - 2))
    end
    if removed == 1 then
      redis.call('PUBLISH', ARGV[arg], '1')
    elseif removed > 1 then
      redis.call('PUBLISH', ARGV[arg], fmt('%d', removed))
    end
    arg = arg - n - 2
  end
end

-- current holds every key read so far: its value as the demands decided
-- so far left it (whole microseconds; with fractions, fraction holds the
-- rest). stored and storedFrac hold the value Redis had, and changed
-- lists the limit keys to write back, once each, at the end. A batch of
-- whole microseconds runs what it ran before fractions were kept.
-- same: every demand after the first is the first again (-N), with no
-- argument of its own.
local demands, exact, same = ARGV[3] == '1' and 1 or tonumber(ARGV[3]), true, false
if not demands then demands, exact = tonumber(string.match(ARGV[3], '^-?%d+')), false end
if demands < 0 then demands, same = -demands, true end

-- Demands all alike (each after the first "=") of at most one pause and
-- one or two GCRA limits in whole microseconds, and no Concurrency limit:
-- the plain demand (a request's rate, with its scope's pause key),
-- batched. Decided in straight lines, without the general path's tables
-- and closures: they cost a batch of one such demand 38k instructions
-- more than take_gcra.lua's 51k, so that a batch of two cost more than
-- two calls of their own (the common batch at 8 callers of a scope);
-- the same replies and writes. TestTakeBatchMatchesTakeGCRA's "alike"
-- runs check it against take_gcra.lua.
local plain = exact and ARGV[7] == '0' and (ARGV[6] == '1' or ARGV[6] == '2') and (ARGV[5] == '0' or ARGV[5] == '1')
if plain then
  local limits, pauses = ARGV[6] == '1' and 1 or 2, ARGV[5] == '1' and 1 or 0
  -- ARGV[8] MaxWait, [9] charge, [10] allowance, then the second limit's
  -- [11] and [12]; the demands after the first are "=" alone.
  local from = 11 + 2 * (limits - 1)
  for a = from, same and 0 or from + demands - 2 do
    if ARGV[a] ~= '=' then
      plain = false
      break
    end
  end
  -- Two limits on one key share its arrival time: the general path.
  if limits == 2 and KEYS[pauses + 1] == KEYS[pauses + 2] then plain = false end
end
if plain then
  local limits, pauses = ARGV[6] == '1' and 1 or 2, ARGV[5] == '1' and 1 or 0
  local pausedUntil, pause = now, -1
  if pauses == 1 then
    local pauseEnd = tonumber(redis.call('GET', KEYS[1]))
    if pauseEnd and pauseEnd > now then pausedUntil, pause = pauseEnd, 0 end
  end
  -- (Arithmetic reads a string as tonumber does, without its call.)
  local key1, charge1, allowance1 = KEYS[pauses + 1], ARGV[9] + 0, ARGV[10] + 0
  local old1 = tonumber(redis.call('GET', key1)) or 0
  local key2, charge2, allowance2, old2
  if limits == 2 then
    key2, charge2, allowance2 = KEYS[pauses + 2], ARGV[11] + 0, ARGV[12] + 0
    old2 = tonumber(redis.call('GET', key2)) or 0
  end
  -- tat1, tat2: the limits' arrival times as the demands so far left
  -- them; maxWait is read at the first wait.
  local tat1, tat2, maxWait = old1, old2, nil
  local replies = {now}
  for demand = 2, demands + 1 do
    local instant, binding = pausedUntil, -1
    if tat1 - allowance1 > instant then instant, binding = tat1 - allowance1, 0 end
    if limits == 2 and tat2 - allowance2 > instant then instant, binding = tat2 - allowance2, 1 end
    if instant > now and not maxWait then maxWait = tonumber(ARGV[8]) end
    if instant > now and instant - now > maxWait then
      replies[demand] = fmt('0 %d %d %d', instant - now, binding, pause)
    else
      if tat1 < instant then tat1 = instant end
      tat1 = tat1 + charge1
      if limits == 2 then
        if tat2 < instant then tat2 = instant end
        tat2 = tat2 + charge2
        replies[demand] = fmt('1 %d -1 -1 %d -1 %d %d', instant - now, now, tat1, tat2)
      elseif instant == now then
        replies[demand] = tat1
      else
        replies[demand] = fmt('1 %d -1 -1 %d -1 %d', instant - now, now, tat1)
      end
    end
  end
  -- Each charged key written once, as the general path does (a charge
  -- of 0 leaves what writing it would).
  if tat1 ~= old1 then
    local key, old, tat = key1, old1, tat1
    -- #include gcra_write.lua
  end
  if limits == 2 and tat2 ~= old2 then
    local key, old, tat = key2, old2, tat2
    -- #include gcra_write.lua
  end
  return replies
end

-- Demands all alike (each after the first "=") of at most one pause, one
-- GCRA limit in whole microseconds and one Concurrency limit, the common
-- in-flight demand (a request's rate and its slot), alone or batched:
-- the decision below in straight lines, without the general path's
-- tables and closures (they cost a third of a lone call), the same
-- replies and writes. TestTakeBatchSlotsMatchTake checks both paths
-- against take.lua.
local straight = exact and ARGV[6] == '1' and ARGV[7] == '1' and (ARGV[5] == '0' or ARGV[5] == '1')
if straight then
  for a = 13, same and 0 or 11 + demands do
    if ARGV[a] ~= '=' then
      straight = false
      break
    end
  end
end
if straight then
  local pauses = ARGV[5] == '1' and 1 or 0
  local pausedUntil, pause = now, -1
  if pauses == 1 then
    local pauseEnd = tonumber(redis.call('GET', KEYS[1]))
    if pauseEnd and pauseEnd > now then pausedUntil, pause = pauseEnd, 0 end
  end
  -- ARGV[8] MaxWait, [9] charge, [10] allowance, [11] lease time, [12] slots
  local key, slotKey = KEYS[pauses + 1], KEYS[pauses + 2]
  -- (Arithmetic reads a string as tonumber does, without its call.)
  local charge, allowance, capacity = ARGV[9] + 0, ARGV[10] + 0, ARGV[12] + 0
  local old = tonumber(redis.call('GET', key)) or 0
  -- tat: the limit's arrival time as the demands so far left it; leases:
  -- the key's live leases, those added included (nil: not read yet), and
  -- held those it held when read; the leases added and not yet written:
  -- first, the id of the first, or from the second on adds (expiry, id,
  -- ...); expiry: theirs (now + the lease time).
  local tat, leases, held, first, adds, expiry, expiryArg = old, nil, 0, nil, nil, nil, nil
  -- The reply, sized for a lone grant's (the clock, TAT, slots left); r:
  -- its last entry.
  local replies, r = {now, false, false}, 1
  for demand = 1, demands do
    local instant, binding = pausedUntil, -1
    if tat - allowance > instant then instant, binding = tat - allowance, 0 end
    r = r + 1
    if instant > now and instant - now > tonumber(ARGV[8]) then
      replies[r] = fmt('0 %d %d %d', instant - now, binding, pause)
    else
      if not leases then
        redis.call('ZREMRANGEBYSCORE', slotKey, '-inf', fmt('%d', now))
        leases = redis.call('ZCARD', slotKey)
        held = leases
      end
      if leases >= capacity then
        -- The ranks are read with the leases added written first.
        if adds then
          redis.call('ZADD', slotKey, unpack(adds))
        elseif first then
          redis.call('ZADD', slotKey, expiryArg, first)
        end
        first, adds = nil, nil
        local frees = tonumber(redis.call('ZRANGE', slotKey, leases - capacity, leases - capacity, 'WITHSCORES')[2])
        if frees < instant then frees = instant end
        replies[r] = fmt('0 %d 1 -1', frees - now)
      else
        if tat < instant then tat = instant end
        tat = tat + charge
        if instant > now then
          replies[r] = fmt('1 %d -1 -1 %d -1 %d 0', instant - now, now, tat)
        else
          if not expiry then expiry = now + ARGV[11]; expiryArg = fmt('%d', expiry) end
          -- (fmt's %d, not '..', which formats a number as %.14g.)
          local id = demand == 1 and callID .. '.1' or callID .. fmt('.%d', demand)
          if adds then
            adds[#adds + 1], adds[#adds + 2] = expiryArg, id
          elseif first then
            adds, first = {expiryArg, first, expiryArg, id}, nil
          else
            first = id
          end
          leases = leases + 1
          replies[r], replies[r + 1] = tat, capacity - leases
          r = r + 1
        end
      end
    end
  end
  if r < 3 then replies[3] = nil end
  if adds then
    redis.call('ZADD', slotKey, unpack(adds))
  elseif first then
    redis.call('ZADD', slotKey, expiryArg, first)
  end
  if expiry then
    local ttl = fmt('%d', math.ceil((expiry - now) / 1000) + slack)
    if held == 0 then
      redis.call('PEXPIRE', slotKey, ttl)
    else
      redis.call('PEXPIRE', slotKey, ttl, 'GT')
    end
  end
  if tat ~= old then
    -- #include gcra_write.lua
  end
  return replies
end

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

-- Concurrency keys, once one is read: slot[key] = {live leases (those
-- this batch added included), true when the key held none when read (so
-- no TTL), the latest expiry added (0: none), n, then from the 5th to the
-- nth the leases added and not yet written (expiry, id, ...)}; slotKeys
-- lists the keys with leases added, once each.
local slot, slotKeys
local lastExpiry, expiryArg -- the latest lease expiry added, and formatted

local replies = {now}
local readKey, readArg = 1, 5 -- where the next demand's keys and arguments start
-- The demand's first key and first pair, its P, G, C and MaxWait, and
-- num[k] the pairs' arguments from the first (0) as numbers (nil for a
-- "q:r" with fractions): a demand "=" keeps the previous one's, parsed
-- once (each tonumber, or arithmetic on an argument, is a strtod).
-- pausedUntil and pausedBy: the latest end of the demand's pauses (not
-- before now) and the first pause that has it (-1: none), the same for a
-- demand "=" (no script writes a pause key in a batch).
local keyAt, argAt, pauses, limits, slots, maxWait, num, pausedUntil, pausedBy
for demand = 1, demands do
  if same and demand > 1 then
    -- the first again (-N)
  elseif ARGV[readArg] == '=' then
    readArg = readArg + 1
  else
    pauses, limits, slots = tonumber(ARGV[readArg]), tonumber(ARGV[readArg + 1]), tonumber(ARGV[readArg + 2])
    keyAt, argAt, maxWait = readKey, readArg + 4, ARGV[readArg + 3]
    readKey, readArg = readKey + pauses + limits + slots, argAt + 2 * (limits + slots)
    num = {}
    for k = 0, 2 * (limits + slots) - 1 do num[k] = tonumber(ARGV[argAt + k]) end
    pausedUntil, pausedBy = now, -1
    for i = 0, pauses - 1 do
      local pauseEnd = get(KEYS[keyAt + i])
      if pauseEnd > pausedUntil then pausedUntil, pausedBy = pauseEnd, i end
    end
  end
  local nextKey, nextArg = keyAt + pauses, argAt
  local instant, pause, binding = pausedUntil, pausedBy, -1
  for i = 0, limits - 1 do
    local earliest
    if exact then
      earliest = get(KEYS[nextKey + i]) - num[2 * i + 1]
    else
      -- ceil(TAT - allowance): tat - q, plus 1 if frac > r.
      local key, room, roomFrac = KEYS[nextKey + i], num[2 * i + 1], 0
      if not room then
        local q, r = string.match(ARGV[nextArg + 2 * i + 1], '^(%d+):(%d+)$')
        room, roomFrac = tonumber(q), tonumber(r)
      end
      earliest = get(key) - room
      if fraction[key] > roomFrac then earliest = earliest + 1 end
    end
    if earliest > instant then instant, binding = earliest, i end
  end
  local refusal
  if instant > now and instant - now > tonumber(maxWait) then
    refusal = fmt('0 %d %d %d', instant - now, binding, pause)
  end
  -- Concurrency: a slot of each limit must be free now, whatever the
  -- instant (take.lua). The ranks of the leases are read with the
  -- batch's own leases written first.
  local slotKey = nextKey + limits
  for j = 0, slots - 1 do
    if refusal then break end
    local key, capacity = KEYS[slotKey + j], num[2 * (limits + j) + 1]
    if not slot then slot, slotKeys = {}, {} end
    local st = slot[key]
    if not st then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now))
      local leases = redis.call('ZCARD', key)
      st = {leases, leases == 0, 0, 4}
      slot[key] = st
    end
    local count = st[1]
    if count >= capacity then
      if st[4] > 4 then
        redis.call('ZADD', key, unpack(st, 5, st[4]))
        st[4] = 4
      end
      local frees = tonumber(redis.call('ZRANGE', key, count - capacity, count - capacity, 'WITHSCORES')[2])
      if frees < instant then frees = instant end
      refusal = fmt('0 %d %d -1', frees - now, limits + j)
    end
  end
  if refusal then
    replies[#replies + 1] = refusal
  else
    -- short: the reply is integers, and the marks are not formatted.
    local marks, tat, short = '', nil, exact and limits <= 1 and instant == now
    for i = 0, limits - 1 do
      local key = KEYS[nextKey + i]
      tat = current[key]
      if exact then
        if tat < instant then tat = instant end
        tat = tat + num[2 * i]
        if not short then marks = marks .. ' ' .. fmt('%d', tat) end
      else
        -- TAT' = max(TAT, instant) + charge, the fraction carried at Rate.
        local frac = fraction[key]
        if tat < instant then tat, frac = instant, 0 end
        local charge = num[2 * i]
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
    -- The leases, when granted at the clock; left: the slots left.
    local left = -1
    if slots > 0 then
      local lease = callID .. '.' .. demand
      for j = 0, slots - 1 do
        local key = KEYS[slotKey + j]
        if instant > now then
          marks = marks .. ' 0'
        else
          local expiry, st = now + num[2 * (limits + j)], slot[key]
          if st[3] == 0 then slotKeys[#slotKeys + 1] = key end
          if expiry > st[3] then st[3] = expiry end
          if expiry ~= lastExpiry then lastExpiry, expiryArg = expiry, fmt('%d', expiry) end
          local n = st[4] + 2
          st[n - 1], st[n], st[4] = expiryArg, lease, n
          st[1] = st[1] + 1
          local free = num[2 * (limits + j) + 1] - st[1]
          if left < 0 or free < left then left = free end
          if not short then marks = marks .. ' ' .. expiryArg end
        end
      end
    end
    if short then
      if limits == 1 then replies[#replies + 1] = tat end
      if slots > 0 then replies[#replies + 1] = left end
    else
      replies[#replies + 1] = fmt('1 %d -1 -1 %d %d', instant - now, now, left) .. marks
    end
  end
end

-- Write the leases added, one ZADD per key, and raise the key's TTL to
-- cover the latest (a key that held none has no TTL: GT would not set
-- one).
for _, key in ipairs(slotKeys or {}) do
  local st = slot[key]
  if st[4] > 4 then redis.call('ZADD', key, unpack(st, 5, st[4])) end
  local ttl = math.ceil((st[3] - now) / 1000) + slack
  if st[2] then
    redis.call('PEXPIRE', key, ttl)
  else
    redis.call('PEXPIRE', key, ttl, 'GT')
  end
end

-- Write every charged key once, by the expiry rule of take_gcra.lua: the
-- value's second decides the expiry; it is kept while the value stays in
-- the second it was in (INCRBY, or SET KEEPTTL for a fraction).
for _, key in ipairs(changed) do
  local old, tat = stored[key], current[key]
  if exact or fraction[key] == 0 and storedFrac[key] == 0 then
    -- #include gcra_write.lua
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
