-- take.lua: decide every limit of one demand, and charge all of them or none.
--
-- Units as in prologue.lua.
--
-- KEYS: the demand's pause keys (ARGV[4] of them), then one key per limit,
-- then, when ARGV[5] > 0, the key that remembers this decision's reply,
-- then 4 per share.lua entry, then the ARGV[6]
-- concurrency keys of leases released earlier (see below). All share one
-- hash tag {scope}; no other key is touched.
--
-- ARGV[1], ARGV[2]  the clock and the decision id (prologue.lua): unique,
--          it names sliding-log members and leases
-- ARGV[3]  MaxWait; at most T/2 for a demand with a headroom or a tenant,
--          which reserves no further ahead (quotamath.RestrictedWait)
-- ARGV[4]  number of pause keys
-- ARGV[5]  how long to remember the reply, ms; 0: not at all
-- ARGV[6]  number of leases released earlier, carried by this call
-- ARGV[7]  number of entries of share.lua (limits shared among tenants
--          or whose class is noted)
-- then 5 per limit, limit i's from ARGV[3 + 5*i]: algorithm, param,
-- allowance, cost, phase; h is the limit's headroom (Bucket.Headroom), 0
-- for most
--   GCRA            param = cost*T, allowance = (Burst-h)*T - cost*T
--                   (T = Per/Rate, exactly; see take_gcra.lua for the
--                   "q" and "q:r:Rate" forms and the arrival times)
--   FIXED_WINDOW    param = Per,    allowance = Rate - h - cost, phase =
--                   the windows' phase F (window k starts at F + k*Per),
--                   or -1: the counter's own (an Anchored limit, below)
--   SLIDING_LOG     param = Per,    allowance = Rate - h - cost, phase =
--                   0, or the demand's expiry "every:phase:spread:reach"
--                   (slidinglog.lua's logExpiry): its entry is then at
--                   logEnd - Per, not at the instant
--   SLIDING_WINDOW  param = Per, or "Per:s:W" (take_window.lua),
--                   allowance = Rate - h - cost, phase as for FIXED_WINDOW
--   CONCURRENCY     param = lease time (Per), allowance = Rate - h
--                   (slots); the member of a lease is the decision id. A
--                   slot is taken only when the demand acts now; a
--                   reservation (delay > 0) leaves it to claim.lua when it
--                   comes due
-- then 8 per share.lua entry
-- then 2 per carried release: the lease id, the channel announcing it
-- (phase is 0 for the algorithms without windows)
--
-- Anchored windows (phase -1): the hash also holds 'a', the phase, and
-- 'e', the instant at which the counter's state ends (the end of the
-- last window charged, synced or anchored, one window later for a
-- sliding window); state whose 'e' has come is no state: the charge that
-- finds none deletes what is left and starts the first window at its
-- instant ('a' = instant mod Per). A reservation (instant after now)
-- keeps the latest instant charged to window k in field '<k>r' (units
-- granted at once were sent by now); anchor.lua reads them when it moves
-- the windows, and sets 'l' (the phase is the vendor's). The mark is the window's start, so that cancel.lua gives
-- nothing back after a move. See keys.go.
--
-- Carried releases: a release (Store.Release) waits briefly for a later
-- take or claim of its scope to carry it (releases.go), so an in-flight
-- limit costs one round trip per request, not two. They are applied
-- first, as release.lua does: ZREM by id (idempotent) and PUBLISH.
--
-- Reply: {1, delay, -1, -1, now, remaining, mark...} when granted (the
-- clock; when granted at once, what the limits other than GCRA admit now
-- after the charge, the least over them less their headrooms, or -1 if
-- every limit is GCRA (Go computes theirs from the arrival times), else
-- 0; a mark per limit: the GCRA arrival time set, "us" or "us:frac" as
-- stored (take_gcra.lua), the window charged, the log entry's instant, or the
-- lease's expiry, 0 for a slot left unclaimed), or {0, delay, binding
-- pause index} when refused; indexes are 0-based, -1 for none.

-- Carried releases first (as in release.lua); a second run is a no-op.
local carried = tonumber(ARGV[6])
for k = #KEYS - carried + 1, #KEYS do
  local lease = #ARGV - 2 * (#KEYS - k) - 1
  if redis.call('ZREM', KEYS[k], ARGV[lease]) == 1 then redis.call('PUBLISH', ARGV[lease + 1], '1') end
end

local pauses = tonumber(ARGV[4])
local shares = tonumber(ARGV[7])
local limits = (#ARGV - 7 - 8 * shares - 2 * carried) / 5
local replyTTL = tonumber(ARGV[5])
local replayKey = KEYS[pauses + limits + 1]
if replyTTL > 0 then
  -- A retry of a call whose reply was lost: answer as the first run did.
  local prev = redis.call('GET', replayKey)
  if prev then
    local reply = {1, 0, -1, -1, now, 0}
    for word in string.gmatch(prev, '%S+') do
      reply[#reply + 1] = tonumber(word) or word -- "us:frac": a GCRA mark
    end
    local granted = table.remove(reply, 7)
    if granted > now then reply[2] = granted - now end
    return reply
  end
end

-- Lent headrooms and fair shares (share.lua): lent[i], the headroom
-- limit i lends the demand.
local maxWait = tonumber(ARGV[3])
local shared, lent = {}, {}
if shares > 0 then
  local firstKey = pauses + limits + 1
  if replyTTL > 0 then firstKey = firstKey + 1 end
  shared, lent = sharesBegin(shares, 8 + 5 * limits, firstKey)
end

-- Pauses: the instant starts at the latest pause end (lowest index on
-- ties).
local instant, pause = now, -1
for i = 1, pauses do
  local pauseEnd = tonumber(redis.call('GET', KEYS[i]))
  if pauseEnd and pauseEnd > instant then instant, pause = pauseEnd, i - 1 end
end
local pausedUntil = instant -- share.lua: a lent headroom is no sooner

-- Fixpoint: instant' = max over limits of the earliest instant, not
-- before instant, at which the limit admits the cost; repeat until no
-- limit raises it.
-- Per limit i, read once: state[i] the GCRA arrival time (and
-- state[limits + i] its fraction, in 1/Rate µs: take_gcra.lua), sliding
-- log floor, concurrency leases.
local state = {}
local logTotal = {} -- sliding log: the running total of its newest entry, 0 if none
-- phases[i]: the phase of window limit i; false for an anchored counter
-- with no state (it admits anything, and its first charge sets it).
local phases, expiries = {}, {}
local logEx = {} -- logEx[i]: sliding log i's expiry, nil for none
for i = 1, limits do
  local arg = 3 + 5 * i
  local algo = ARGV[arg]
  if algo == SLIDING_LOG then
    logEx[i] = logExpiry(ARGV[arg + 4])
  elseif algo == FIXED_WINDOW or algo == SLIDING_WINDOW then
    local phase = tonumber(ARGV[arg + 4])
    if phase < 0 then
      local st = redis.call('HMGET', KEYS[pauses + i], 'a', 'e')
      phase, expiries[i] = tonumber(st[1]), tonumber(st[2])
      if not phase or not expiries[i] or expiries[i] <= now then phase = false end
    end
    phases[i] = phase
  end
end
-- common returns the earliest instant, not before instant, at which
-- every limit admits its cost, and the 0-based index of the limit that
-- last raised it (-1: none did); nil after 1000 rounds.
local function common(instant)
  local binding, rounds = -1, 0
  while true do
    local nextInstant, raiser = instant, -1
    for i = 1, limits do
      local arg = 3 + 5 * i
      local algo, param, allowance = ARGV[arg], tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2])
      if lent[i] then allowance = allowance + lent[i] end
      local key = KEYS[pauses + i]
      local earliest = instant
      if phases[i] == false then
        -- An anchored counter with no state admits any cost up to Rate.
      elseif algo == GCRA then
        -- The arrival time, "us" or "us:frac", and the allowance, "q" or
        -- "q:r" (take_gcra.lua): the earliest instant is ceil(TAT -
        -- allowance).
        local tat = state[i]
        if not tat then
          local raw = redis.call('GET', key)
          local frac = 0
          tat = tonumber(raw)
          if not tat then
            tat = 0
            if raw then
              local us, f = string.match(raw, '^(%d+):(%d+)$')
              tat, frac = tonumber(us) or 0, tonumber(f) or 0
            end
          end
          state[i], state[limits + i] = tat, frac
        end
        local roomFrac = 0
        if not allowance then
          local q, r = string.match(ARGV[arg + 2], '^(%d+):(%d+)$')
          allowance, roomFrac = tonumber(q), tonumber(r)
        end
        local first = tat - allowance
        if state[limits + i] > roomFrac then first = first + 1 end
        if first > earliest then earliest = first end
      elseif algo == CONCURRENCY then
        -- Decided below, for now only.
      elseif algo == FIXED_WINDOW then
        -- First window, the current one or later, with room for the cost.
        local per, phase = param, phases[i]
        local window = floor((instant - phase) / per)
        while (tonumber(redis.call('HGET', key, fmt('%d', window))) or 0) > allowance do
          window = window + 1
        end
        if window * per + phase > earliest then earliest = window * per + phase end
      elseif algo == SLIDING_WINDOW then
        -- prev*(W-j) <= (Rate-cur-cost)*W, j the steps of the window gone
        -- (take_window.lua).
        local per, step, steps, phase = param, 1, param, phases[i]
        if not per then
          local p, s, w = string.match(ARGV[arg + 1], '^(%d+):(%d+):(%d+)$')
          per, step, steps = tonumber(p), tonumber(s), tonumber(w)
        end
        local window = floor((instant - phase) / per)
        while true do
          local start = window * per + phase
          local counts = redis.call('HMGET', key, fmt('%d', window - 1), fmt('%d', window))
          local room = allowance - (tonumber(counts[2]) or 0)
          if room >= 0 then
            local at = instant
            if at < start then at = start end
            local prev = tonumber(counts[1]) or 0
            local need = 0
            if prev > 0 then need = steps - floor(room * steps / prev) end
            if need < steps then
              if start + need * step > at then at = start + need * step end
              earliest = at
              break
            end
          end
          window = window + 1
        end
      else
        -- Sliding log: a sorted set of the granted entries, member
        -- "instant:cost:id", score the running total of the costs up to and
        -- including the entry, in order of instant (an entry goes after
        -- those at or before its instant and the later ones move up by its
        -- cost: slidinglog.lua, sync.lua), so the cost of the entries after
        -- one is total - its score. When no entry lies after the instant,
        -- the cost fits at e when the entries after e-Per hold at most the
        -- allowance, that is when the running total up to e-Per reaches
        -- need = total-allowance: when the first entry whose score reaches
        -- need is at or before e-Per, or when the total before that entry
        -- already does (it is then the first entry left, and the total
        -- before it counts entries pruned). Two O(log n) reads, once per
        -- call, give logFloor, the earliest instant that allows: the same
        -- instant as summing the window. When entries (reservations) lie
        -- after the instant, a demand may go before them where it leaves
        -- every window room: slidinglog.lua reads those entries once and
        -- finds the earliest such instant (state[i] is then what it read).
        local logFloor = state[i]
        if not logFloor then
          logFloor, logTotal[i] = 0, 0
          local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
          if newest[1] then
            local total = tonumber(newest[2])
            logTotal[i] = total
            logFloor = tonumber(string.match(newest[1], '^%d+'))
            if logFloor > instant then
              logFloor = logLoad(key, instant)
            else
              -- The window ending at e fits once the total up to e-Per
              -- reaches total - allowance (slidinglog.lua's logReach).
              local reach = logReach(key, total - allowance)
              if reach and reach + param > logFloor then logFloor = reach + param end
            end
          end
          state[i] = logFloor
        end
        if type(logFloor) == 'table' then
          earliest = logEarliest(key, logFloor, instant, allowance, param, logEx[i])
        elseif logFloor > earliest then
          earliest = logFloor
        end
      end
      if earliest > nextInstant then nextInstant, raiser = earliest, i - 1 end
    end
    if raiser < 0 then return instant, binding end
    instant, binding = nextInstant, raiser
    rounds = rounds + 1
    if rounds == 1000 then return nil end
  end
end
local binding
instant, binding = common(instant)
if not instant then
  return redis.error_reply('ERR throttle: no common instant for the limits after 1000 rounds')
end

if shares > 0 then
  local refusal = sharesRefusal(shared, instant, pausedUntil, maxWait, binding, pause, common)
  if refusal then return refusal end
elseif instant - now > maxWait then
  return {0, instant - now, binding, pause}
end

-- Concurrency: a slot must be free now, whatever the instant is, since a
-- slot frees when its holder releases it, which no script can foresee (a
-- reservation does not take it, but a demand queued behind busy slots
-- should not hold rate quota it may not be able to use). Leases
-- whose expiry is not after now are pruned, but only when the set looks
-- full: below Rate members there is a free slot anyway, and the set never
-- grows past Rate. A full limit refuses with the delay until max(instant,
-- the expiry that frees a slot if nobody releases).
for i = 1, limits do
  local arg = 3 + 5 * i
  if ARGV[arg] == CONCURRENCY then
    local key = KEYS[pauses + i]
    local leases, slots = redis.call('ZCARD', key), tonumber(ARGV[arg + 2])
    if leases >= slots then
      leases = leases - redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now))
    end
    if leases >= slots then
      local frees = tonumber(redis.call('ZRANGE', key, leases - slots, leases - slots, 'WITHSCORES')[2])
      if frees < instant then frees = instant end
      return {0, frees - now, i - 1, -1}
    end
    state[i] = leases
  end
end

-- Charge every limit at the instant. TTLs (ms, rounded up) end when the
-- state can no longer matter: 1 to 2 s after the arrival time (GCRA's
-- expiry rule, see take_gcra.lua), at the end of the window (one window
-- later for the sliding window, which reads it as the previous one), or
-- Per after the newest log entry.
-- When granted at once, remaining is the least, over the limits other
-- than GCRA, of what each admits now after the charge (quotamath's State):
-- windows Rate less the (weighted) count, the log Rate less the cost
-- after now-Per, Concurrency its free slots (in a demand of Concurrency
-- limits alone). Go adds GCRA's, from the arrival times, with the 128-bit
-- arithmetic it needs.
local reply = {1, instant - now, -1, -1, now, 0}
local remaining = nil
-- Free slots count in remaining only in a demand of Concurrency limits
-- alone (quota.Decision.Remaining): they free on release, not with time.
local slotsOnly = true
for i = 1, limits do
  if ARGV[3 + 5 * i] ~= CONCURRENCY then slotsOnly = false break end
end
local function leaves(left)
  if left < 0 then left = 0 end -- a log holding reservations for later
  if instant == now and (not remaining or left < remaining) then remaining = left end
end
for i = 1, limits do
  local arg = 3 + 5 * i
  local algo, param, cost = ARGV[arg], tonumber(ARGV[arg + 1]), ARGV[arg + 3]
  local key = KEYS[pauses + i]
  if algo == GCRA then
    -- TAT' = max(TAT, instant) + cost*T, the charge "q" or "q:r:Rate"
    -- (take_gcra.lua).
    local old, oldFrac = state[i], state[limits + i]
    local tat, frac = old, oldFrac
    if tat < instant then tat, frac = instant, 0 end
    local charge = tonumber(param)
    if charge then
      tat = tat + charge
    else
      local q, r, rate = string.match(ARGV[arg + 1], '^(%d+):(%d+):(%d+)$')
      tat, frac = tat + q, frac + r
      if frac >= tonumber(rate) then tat, frac = tat + 1, frac - rate end
    end
    -- The expiry rule of GCRA keys (take_gcra.lua): at the end of the
    -- second after the one that holds the value, rewritten only when the
    -- value moves to another second (INCRBY, or SET KEEPTTL for a
    -- fraction, keeps the TTL).
    local value
    if frac > 0 then value = fmt('%d:%d', tat, frac) end
    if slack > 0 then
      redis.call('SET', key, value or fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
    elseif old > 0 and floor(old / GRID) == floor(tat / GRID) then
      if frac == 0 and oldFrac == 0 then
        redis.call('INCRBY', key, fmt('%d', tat - old))
      else
        redis.call('SET', key, value or fmt('%d', tat), 'KEEPTTL')
      end
    else
      redis.call('SET', key, value or fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
    end
    reply[6 + i] = value or tat
  elseif algo == CONCURRENCY then
    if instant > now then
      -- A reservation holds no slot while it waits: its holder claims
      -- one when it comes due (claim.lua). Mark 0: unclaimed.
      reply[6 + i] = 0
    else
      -- The lease runs from now to now + Per. The key lives until its
      -- latest lease expires.
      local expiry = now + param
      redis.call('ZADD', key, fmt('%d', expiry), callID)
      local ttl = math.ceil((expiry - now) / 1000) + slack
      if state[i] == 0 then
        redis.call('PEXPIRE', key, ttl)
      else
        redis.call('PEXPIRE', key, ttl, 'GT')
      end
      reply[6 + i] = expiry
      if slotsOnly then
        leaves(tonumber(ARGV[arg + 2]) - redis.call('ZCOUNT', key, fmt('(%d', now), '+inf'))
      end
    end
  elseif algo == SLIDING_LOG then
    -- The entry's score is the running total with its cost: it goes last
    -- when its instant is not before the newest entry, else in order
    -- (slidinglog.lua). Its instant is the one decided, or with an
    -- expiry logEnd - Per, which may be before entries that logLoad did
    -- not read for the instant decided: they are read from there.
    local per = param
    local at = logEnd(logEx[i], instant, per) - per
    local total = logTotal[i] + tonumber(cost)
    local member = fmt('%d:%s:%s', at, cost, callID)
    local loaded = state[i]
    if logEx[i] and logTotal[i] > 0 then loaded = logLoad(key, at) end
    if type(loaded) == 'table' then
      total = logInsert(key, loaded, at, tonumber(cost), member)
    else
      redis.call('ZADD', key, fmt('%d', total), member)
    end
    if logTotal[i] > 0 then
      -- Entries at or before now-Per can matter no more; they are a
      -- prefix. Read from the head in batches that double, so k of them
      -- cost O(log k) reads (each decision adds one: usually one read of
      -- two finds one); the new entry, after now-Per, ends the search.
      local old, size = now - per, 2
      while true do
        local head = redis.call('ZRANGE', key, 0, size - 1)
        local stale = 0
        while head[stale + 1] and tonumber(string.match(head[stale + 1], '^%d+')) <= old do
          stale = stale + 1
        end
        if stale > 0 then redis.call('ZREMRANGEBYRANK', key, 0, stale - 1) end
        if stale < size then break end
        size = 2 * size
      end
      if total >= 4503599627370496 then
        -- The total nears 2^53, past which doubles lose integers: count
        -- again from 0 before the first entry (once in 2^52 units).
        local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
        local base = tonumber(all[2]) - tonumber(string.match(all[1], '^%d+:(%d+):'))
        for x = 1, #all, 2 do
          redis.call('ZADD', key, fmt('%d', tonumber(all[x + 1]) - base), all[x])
        end
      end
    end
    -- The log lives until Per after its newest entry. An entry placed in
    -- a loaded log (which had entries, and so a TTL) may be before them:
    -- GT never shortens it.
    local ttl = math.ceil((at + per - now) / 1000) + slack
    if type(loaded) == 'table' then
      redis.call('PEXPIRE', key, ttl, 'GT')
    else
      redis.call('PEXPIRE', key, ttl)
    end
    reply[6 + i] = at
    if instant == now then
      -- After the pruning above, the first entry is the first after
      -- now-Per: the cost since is the newest total less the total
      -- before that entry.
      local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      local newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
      local base = tonumber(first[2]) - tonumber(string.match(first[1], '^%d+:(%d+):'))
      leaves(tonumber(ARGV[arg + 2]) + tonumber(cost) - (newest - base))
    end
  else
    local per, step, steps, phase = param, 1, param, phases[i]
    if not per then -- a sliding window in steps: "Per:s:W"
      local p, s, w = string.match(ARGV[arg + 1], '^(%d+):(%d+):(%d+)$')
      per, step, steps = tonumber(p), tonumber(s), tonumber(w)
    end
    local anchored = tonumber(ARGV[arg + 4]) < 0
    if phase == false then
      -- The first charge of an anchored counter starts its first window.
      redis.call('DEL', key)
      phase = instant % per
      redis.call('HSET', key, 'a', fmt('%d', phase))
      expiries[i] = 0
    end
    local window = floor((instant - phase) / per)
    local field = fmt('%d', window)
    local count = redis.call('HINCRBY', key, field, cost)
    if count == tonumber(cost) then
      -- A new window (once per window and key): extend the TTL to its
      -- end, and drop windows that have passed.
      do
        local expiry = expiries[i]
        -- #include window_expiry.lua
      end
      if redis.call('HLEN', key) > 3 then
        local keep = floor((now - phase) / per)
        if algo == SLIDING_WINDOW then keep = keep - 1 end
        -- An anchored counter keeps one window more: a move may count its
        -- units in the new windows (anchor.lua). Fields are window
        -- indexes, '<k>r', 'a' and 'e'.
        if anchored then keep = keep - 1 end
        for _, name in ipairs(redis.call('HKEYS', key)) do
          local k = tonumber(string.match(name, '^%-?%d+'))
          if k and k < keep then redis.call('HDEL', key, name) end
        end
      end
    end
    if anchored then
      if instant > now then
        local last = tonumber(redis.call('HGET', key, field .. 'r'))
        if not last or instant > last then redis.call('HSET', key, field .. 'r', fmt('%d', instant)) end
      end
      reply[6 + i] = window * per + phase
    else
      reply[6 + i] = window
    end
    if instant == now then
      local left = tonumber(ARGV[arg + 2]) + tonumber(cost) - count
      if algo == SLIDING_WINDOW then
        local prev = tonumber(redis.call('HGET', key, fmt('%d', window - 1))) or 0
        local gone = now - window * per - phase -- steps of the window gone
        if step > 1 then gone = floor(gone / step) end
        left = left - math.ceil(prev * (steps - gone) / steps)
        if left < 0 then left = 0 end
      end
      leaves(left)
    end
  end
end
if remaining then
  reply[6] = remaining
elseif instant == now then
  reply[6] = -1 -- no limit but GCRA has a say
end
if shares > 0 then sharesCharged(shared, instant) end

if replyTTL > 0 then
  local remembered = fmt('%d', instant)
  for i = 1, limits do
    local mark = reply[6 + i]
    if type(mark) == 'number' then mark = fmt('%d', mark) end -- else "us:frac"
    remembered = remembered .. ' ' .. mark
  end
  redis.call('SET', replayKey, remembered, 'PX', replyTTL)
end
return reply
