-- retime.lua: move what a granted take.lua charged to now, on every limit
-- of the demand, or refuse with nothing changed (quota.Retimer).
--
-- Units and key layout as in take.lua; sliding logs with slidinglog.lua
-- (a part of this script, scriptParts in scripts.go). KEYS: the demand's
-- pause keys (ARGV[3] of them), then one key per limit, in order.
--
-- ARGV[1], ARGV[2]  the clock and the reservation's id (prologue.lua),
--                   which names its sliding-log members; a call sent again
--                   is refused there, and nothing moves twice
-- ARGV[3]  number of pause keys
-- then 6 per limit, limit i's from ARGV[6*i - 2]: algorithm, param,
-- allowance, mark, cost, phase; h is the limit's headroom
--   GCRA            param = cost*T as "q:r:Rate", allowance = (Burst-h)*T
--                   - cost*T as "q" or "q:r" (take_gcra.lua); mark =
--                   "us:ns", the arrival time the charge set in
--                   nanoseconds, rounded up (cancel.lua)
--   FIXED_WINDOW,   param = Per (or "Per:s:W", take_window.lua), allowance
--   SLIDING_WINDOW  = Rate - h - cost, mark = the window charged (its
--                   start for an Anchored limit, phase -1), phase as in
--                   take.lua
--   SLIDING_LOG     param = Per, allowance = Rate - h - cost, mark = the
--                   entry's instant; its member is "instant:cost:id";
--                   phase = 0, or the demand's expiry, as in take.lua:
--                   the entry moves to logEnd(now) - Per
--   CONCURRENCY     nothing is read: its slot stays as it is
--
-- Each limit moves as quota.Retimer says, and as internal/quotamath's
-- GCRAKeeps and memstore's retime compute it: GCRA is left as it is while
-- the arrival time before the charge (mark - cost*T) is at or after now,
-- else given back and charged at now if the bucket's arrival time still
-- has the charge's mark, else charged at now if that arrival time is not
-- after now, else refused; a window's cost leaves the window charged (if
-- it is still on the counter's windows) for the window of now, unless
-- that is the one charged; a log's entry leaves its instant (if it is
-- still there) for now. The move is admitted where take.lua would admit
-- the cost at now.
--
-- All or none: every GCRA and window limit is decided first, from reads
-- alone. Then each sliding log's entry is removed and the log decided at
-- now; a refusal puts back the entries removed so far, at their instants.
-- Only then is anything charged.
--
-- Reply: {1, now, mark...} when retimed, a mark per limit: the GCRA
-- arrival time set ("us" or "us:frac"), the window charged (its start, if
-- anchored), the log entry's instant, or "-" for a limit left as it was (Go keeps
-- its mark); or {0, binding limit, pause} when refused, 0-based, -1 for
-- none.

local pauses = tonumber(ARGV[3])
local limits = (#ARGV - 3) / 6
for i = 1, pauses do
  local pauseEnd = tonumber(redis.call('GET', KEYS[i]))
  if pauseEnd and pauseEnd > now then return {0, -1, i - 1} end
end

-- parseTime reads "q" or "q:r" (or "q:r:Rate") as µs and fraction.
local function parseTime(s)
  local q = tonumber(s)
  if q then return q, 0 end
  local us, f = string.match(s, '^(%d+):(%d+)')
  return tonumber(us), tonumber(f)
end

-- The plan, per limit: what to write once all are decided.
local plan = {}
local reply = {1, now}
for i = 1, limits do
  local arg = 6 * i - 2
  local algo, key = ARGV[arg], KEYS[pauses + i]
  local mark, cost = ARGV[arg + 3], tonumber(ARGV[arg + 4])
  reply[2 + i] = '-'
  if algo == GCRA then
    local raw = redis.call('GET', key)
    local tat, frac = 0, 0
    if raw then tat, frac = parseTime(raw) end
    local q, r, rate = string.match(ARGV[arg + 1], '^(%d+):(%d+):(%d+)$')
    q, r, rate = tonumber(q), tonumber(r), tonumber(rate)
    local markUs, markNs = string.match(mark, '^(%d+):(%d+)$')
    markUs, markNs = tonumber(markUs), tonumber(markNs)
    -- The bucket's mark: ceil(1000*frac/Rate) ns past tat (cancel.lua).
    local us, ns = tat, math.ceil(frac * 1000 / rate)
    if ns == 1000 then us, ns = us + 1, 0 end
    -- mark - 1ns - ceil(cost*T in ns) >= now, in parts: below -2 µs or
    -- above 2 µs the nanoseconds cannot change the answer.
    local chargeNs = math.ceil(r * 1000 / rate)
    local gap = markUs - q - now
    local keeps = gap > 2 or gap >= -2 and gap * 1000 + markNs - 1 - chargeNs >= 0
    local base, baseFrac -- the arrival time to charge at now from
    if us == markUs and ns == markNs then
      base, baseFrac = tat - q, frac - r
      if baseFrac < 0 then base, baseFrac = base - 1, baseFrac + rate end
    elseif keeps then
      base = nil
    elseif tat < now or tat == now and frac == 0 then
      base, baseFrac = tat, frac
    else
      return {0, i - 1, -1} -- later grants ahead of now sit on it
    end
    if base then
      -- Admitted at now when ceil(base - allowance) <= now (take.lua).
      local room, roomFrac = parseTime(ARGV[arg + 2])
      local first = base - room
      if baseFrac > roomFrac then first = first + 1 end
      if first > now then return {0, i - 1, -1} end
      if base < now then base, baseFrac = now, 0 end
      local set, setFrac = base + q, baseFrac + r
      if setFrac >= rate then set, setFrac = set + 1, setFrac - rate end
      plan[i] = {set, setFrac}
      if setFrac > 0 then
        reply[2 + i] = fmt('%d:%d', set, setFrac)
      else
        reply[2 + i] = set
      end
    end
  elseif algo == FIXED_WINDOW or algo == SLIDING_WINDOW then
    local per, step, steps = tonumber(ARGV[arg + 1]), 1, nil
    if not per then
      local p, s, w = string.match(ARGV[arg + 1], '^(%d+):(%d+):(%d+)$')
      per, step, steps = tonumber(p), tonumber(s), tonumber(w)
    end
    steps = steps or per
    local allowance = tonumber(ARGV[arg + 2])
    local phase, expiry = tonumber(ARGV[arg + 5]), nil
    local anchored = phase < 0
    if anchored then
      local st = redis.call('HMGET', key, 'a', 'e')
      phase, expiry = tonumber(st[1]), tonumber(st[2])
      if not phase or not expiry or expiry <= now then phase = false end
    end
    -- The window charged, if still on the counter's windows.
    local from = tonumber(mark)
    if anchored then
      if phase and (from - phase) % per == 0 then
        from = (from - phase) / per
      else
        from = nil
      end
    end
    if phase == false then
      -- An anchored counter with no state admits any cost up to Rate;
      -- the charge starts its first window at now (take.lua).
      plan[i] = {false, nil, per, now % per, 0}
      reply[2 + i] = now
    else
      local window = floor((now - phase) / per)
      if from ~= window then
        local counts = redis.call('HMGET', key, fmt('%d', window - 1), fmt('%d', window))
        local prev, cur = tonumber(counts[1]) or 0, tonumber(counts[2]) or 0
        if from == window - 1 then
          prev = prev - cost
          if prev < 0 then prev = 0 end
        end
        local room = allowance - cur
        local fits = room >= 0
        if fits and algo == SLIDING_WINDOW and prev > 0 then
          -- prev*(W-j) <= room*W, j the steps of the window gone.
          local j = floor((now - window * per - phase) / step)
          fits = prev * (steps - j) <= room * steps
        end
        if not fits then return {0, i - 1, -1} end
        plan[i] = {window, from, per, phase, expiry}
        if anchored then
          reply[2 + i] = window * per + phase
        else
          reply[2 + i] = window
        end
      end
    end
  end
end

-- Sliding logs: remove, decide at now, and put back on a refusal.
local removed = {}
local function putBack()
  for _, e in ipairs(removed) do
    local lg = logLoad(e.key, e.at)
    logInsert(e.key, lg, e.at, e.cost, e.member)
    local ttl = math.ceil((e.at + e.per - now) / 1000) + slack
    if ttl < 1 then ttl = 1 end
    local left = redis.call('PTTL', e.key)
    if left < 0 or left < ttl then redis.call('PEXPIRE', e.key, ttl) end
  end
end
for i = 1, limits do
  local arg = 6 * i - 2
  if ARGV[arg] == SLIDING_LOG then
    local key, per, allowance = KEYS[pauses + i], tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2])
    local at, cost = tonumber(ARGV[arg + 3]), tonumber(ARGV[arg + 4])
    local member = fmt('%d:%d:%s', at, cost, callID)
    if logRemove(key, member, cost) then
      removed[#removed + 1] = {key = key, at = at, cost = cost, member = member, per = per}
    end
    -- The entry's new instant (slidinglog.lua's logEnd), which may be
    -- before now: the log is read from there.
    local ex = logExpiry(ARGV[arg + 5])
    local entry = logEnd(ex, now, per) - per
    local lg = logLoad(key, math.min(now, entry))
    if logEarliest(key, lg, now, allowance, per, ex) ~= now then
      putBack()
      return {0, i - 1, -1}
    end
    plan[i] = {lg, per, cost, entry}
    reply[2 + i] = entry
  end
end

-- Charge.
for i = 1, limits do
  local arg = 6 * i - 2
  local algo, key, p = ARGV[arg], KEYS[pauses + i], plan[i]
  local cost = tonumber(ARGV[arg + 4])
  if p and algo == GCRA then
    -- The expiry rule of GCRA keys (take_gcra.lua).
    local value = fmt('%d', p[1])
    if p[2] > 0 then value = fmt('%d:%d', p[1], p[2]) end
    if slack > 0 then
      redis.call('SET', key, value, 'PX', math.ceil((p[1] - now) / 1000) + slack)
    else
      redis.call('SET', key, value, 'PXAT', fmt('%d', (floor(p[1] / GRID) + 2) * 1000))
    end
  elseif p and algo == SLIDING_LOG then
    logInsert(key, p[1], p[4], p[3], fmt('%d:%d:%s', p[4], p[3], callID))
    local ttl = math.ceil((p[4] + p[2] - now) / 1000) + slack
    local left = redis.call('PTTL', key)
    if left < 0 or left < ttl then redis.call('PEXPIRE', key, ttl) end
  elseif p then
    local window, from, per, phase, expiry = p[1], p[2], p[3], p[4], p[5]
    local anchored = tonumber(ARGV[arg + 5]) < 0
    if window == false then
      redis.call('DEL', key)
      redis.call('HSET', key, 'a', fmt('%d', phase))
      window, expiry = floor((now - phase) / per), 0
    end
    -- The new window first, so the key is never left empty meanwhile.
    local count = redis.call('HINCRBY', key, fmt('%d', window), cost)
    if count == cost then
      -- #include window_expiry.lua
    end
    if from and redis.call('HEXISTS', key, fmt('%d', from)) == 1 then
      if redis.call('HINCRBY', key, fmt('%d', from), -cost) <= 0 then
        redis.call('HDEL', key, fmt('%d', from))
      end
    end
  end
end
return reply
