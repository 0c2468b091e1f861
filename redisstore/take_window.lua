-- take_window.lua: take.lua for a demand of one fixed-window or sliding-
-- window limit on a fixed phase (not Anchored), at most one pause key and
-- no reply to remember (Take picks it then). It makes the same decision and charges the same key with the
-- same count and TTL as take.lua, in fewer Redis commands: a fixed window
-- with room costs TIME and one HINCRBY, a sliding window TIME, one HMGET
-- and one HINCRBY (Redis runs scripts on its only thread, so every
-- redis.call and every number parsed or formatted shows in throughput).
--
-- Units as in prologue.lua.
--
-- KEYS: the pause key if any, then the limit's key (a hash: window index
-- -> count, keys.go), then its class notes' key when the demand's class is
-- noted (quota.Bucket.Noted; share.lua). All share the hash tag {scope};
-- no other key is touched.
--
-- ARGV[1], ARGV[2]  the clock and "" (prologue.lua)
-- ARGV[3]  the algorithm: FIXED_WINDOW or SLIDING_WINDOW
-- ARGV[4]  MaxWait
-- ARGV[5]  Per; for a sliding window whose weight falls in steps of more
--          than 1 µs, "Per:s:W" (below)
-- ARGV[6]  Rate
-- ARGV[7]  cost (at most Rate; Go checks)
-- ARGV[8]  the windows' phase F: window k starts at F + k*Per
-- ARGV[9], ARGV[10]  only when the class is noted: the demand's headroom
--          h (Rate above is the limit's less h) and T, rounded up
--          (share.lua's note and claim). The headroom is lent, as in
--          take.lua, when no class with a smaller one is active
--          (class_note.lua); a demand refused while it is
--          held is refused until it may be lent, if that is sooner.
--
-- Reply: a string of integers, "1 delay -1 -1 now remaining window" when
-- granted (remaining: what the window admits now, after the charge, when
-- granted at once; else 0), "0 delay limit pause" when refused
-- (take_gcra.lua's format).

local fixed = ARGV[3] == FIXED_WINDOW
local maxWait = ARGV[4]

local instant, pause = now, -1
local key = KEYS[1]
local noted = #ARGV == 10
if #KEYS == 2 and not noted or #KEYS == 3 then
  local pauseEnd = tonumber(redis.call('GET', key))
  if pauseEnd and pauseEnd > instant then instant, pause = pauseEnd, 0 end
  key = KEYS[2]
end
local pausedUntil = instant -- a lent headroom is no sooner
-- MaxWait is parsed only when there is a wait, and the cost goes to
-- HINCRBY as it came (Redis formats a Lua number with %.17g, which costs
-- more than the parse saved).
local per, rate, cost, phase = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
-- admits: Rate less the headroom, unless it is lent; rate, without it,
-- is what remaining counts from (take.lua).
local admits, lend = rate, nil
if noted then
  local noteKey, note, claim, lent = KEYS[#KEYS], tonumber(ARGV[9]), tonumber(ARGV[10]), 0
  -- #include class_note.lua
  admits = rate + lent
end
local step, steps = 1, per -- the sliding window's weight steps, below
if not per then
  local p, s, w = string.match(ARGV[5], '^(%d+):(%d+):(%d+)$')
  per, step, steps = tonumber(p), tonumber(s), tonumber(w)
end
local window = floor((instant - phase) / per)
local count, binding, prev = nil, -1, 0
if fixed then
  if instant == now or instant - now <= tonumber(maxWait) then
    -- Charge the window of t, and give the cost back if that overfills
    -- it (nothing is charged on refusal): one command when there is room.
    count = redis.call('HINCRBY', key, fmt('%d', window), ARGV[7])
    if count > admits then
      redis.call('HINCRBY', key, fmt('%d', window), fmt('%d', -cost))
      count, window = nil, window + 1
    end
  end
  if not count then
    -- The first window from this one with room for the cost sets the
    -- instant.
    local room = admits - cost
    while (tonumber(redis.call('HGET', key, fmt('%d', window))) or 0) > room do
      window = window + 1
    end
    if window * per + phase > instant then instant, binding = window * per + phase, 0 end
  end
else
  -- Sliding window: the first instant from this one, in this window or
  -- later, at which prev*(W-j) <= (Rate-cur-cost)*W, j the steps of the
  -- window gone (take.lua's search). The weight of the previous window
  -- falls in steps of s µs, W = ceil(Per/s) of them (quotamath's Steps):
  -- s = 1, W = Per while Per*Rate <= 2^52, else the least s with W*Rate
  -- <= 2^52, which Go sends; so every product here stays below 2^52,
  -- exact in a double, and so does the floor of the quotient.
  local roomIfEmpty = admits - cost
  while true do
    local start = window * per + phase
    local counts = redis.call('HMGET', key, fmt('%d', window - 1), fmt('%d', window))
    local room = roomIfEmpty - (tonumber(counts[2]) or 0)
    if room >= 0 then
      local at = instant
      if at < start then at = start end
      prev = tonumber(counts[1]) or 0
      local need = 0
      if prev > 0 then need = steps - floor(room * steps / prev) end
      if need < steps then
        if start + need * step > at then at = start + need * step end
        if at > instant then instant, binding = at, 0 end
        break
      end
    end
    window = window + 1
  end
end
if instant > now and instant - now > tonumber(maxWait) then
  if lend then
    if lend < pausedUntil then lend = pausedUntil end
    if lend < instant then instant, binding, pause = lend, 0, -1 end
  end
  return fmt('0 %d %d %d', instant - now, binding, pause)
end
if not count then
  count = redis.call('HINCRBY', key, fmt('%d', window), ARGV[7])
end

if count == cost then
  -- A new window (once per window and key): extend the TTL to its end
  -- (one window later for the sliding window, which reads it as the
  -- previous one), and drop windows that have passed (as take.lua does).
  local ends = (window + 1) * per + phase
  if not fixed then ends = ends + per end
  local ttl = math.ceil((ends - now) / 1000) + slack
  if redis.call('PEXPIRE', key, ttl, 'NX') == 0 then
    redis.call('PEXPIRE', key, ttl, 'GT')
  end
  if redis.call('HLEN', key) > 3 then
    local keep = floor((now - phase) / per)
    if not fixed then keep = keep - 1 end
    for _, field in ipairs(redis.call('HKEYS', key)) do
      if tonumber(field) < keep then redis.call('HDEL', key, field) end
    end
  end
end
-- What the window admits now: Rate less the count, for the sliding
-- window less the weighted count cur + ceil(prev*(W-j)/W) (quotamath's
-- State).
local remaining = 0
if instant == now then
  remaining = rate - count -- below 0 when a lent headroom is used
  if not fixed and prev > 0 then
    local gone = now - window * per - phase -- steps of the window gone
    if step > 1 then gone = floor(gone / step) end
    remaining = remaining - math.ceil(prev * (steps - gone) / steps)
  end
  if remaining < 0 then remaining = 0 end
end
return fmt('1 %d -1 -1 %d %d %d', instant - now, now, remaining, window)
