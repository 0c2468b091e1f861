-- sync.lua: lower one limit's counter to what the vendor says remains,
-- never raise it (quota.Syncer).
--
-- Units as in prologue.lua.
--
-- KEYS[1]  the limit's key (layout in keys.go), in the scope's hash tag
-- ARGV[1], ARGV[2]  the clock and the call id (prologue.lua); for a
--          sliding log, the id names the filler entry's member
-- ARGV[3]  the algorithm: GCRA, FIXED_WINDOW, SLIDING_LOG or SLIDING_WINDOW
-- ARGV[4]  within: time until the vendor's reset (positive)
-- ARGV[5]  GCRA: (Burst - remaining) * T, "q" or "q:r" (q µs and r/Rate
--          of one, take_gcra.lua); others: Per
-- ARGV[6]  others: the count the current window (or the last Per of the
--          log) must reach, Rate - remaining
--
-- Reply: 1 if the counter was lowered, 0 if it already admitted no more.

local key, algo, within = KEYS[1], ARGV[3], tonumber(ARGV[4])

-- extend sets the key's TTL to at least ttl ms, never shortening it.
local function extend(ttl)
  if redis.call('PEXPIRE', key, ttl, 'NX') == 0 then
    redis.call('PEXPIRE', key, ttl, 'GT')
  end
end

if algo == GCRA then
  -- From now to the reset at most `remaining` units may pass, so the
  -- arrival time is at least now + within + (Burst - remaining) * T.
  local tat, frac = tonumber(ARGV[5]), 0
  if not tat then
    local q, r = string.match(ARGV[5], '^(%d+):(%d+)$')
    tat, frac = tonumber(q), tonumber(r)
  end
  tat = now + within + tat
  local raw = redis.call('GET', key)
  local current, currentFrac = tonumber(raw), 0
  if raw and not current then
    local us, f = string.match(raw, '^(%d+):(%d+)$')
    current, currentFrac = tonumber(us), tonumber(f)
  end
  current = current or 0
  if tat < current or tat == current and frac <= currentFrac then return 0 end
  local value = fmt('%d', tat)
  if frac > 0 then value = fmt('%d:%d', tat, frac) end
  -- The expiry rule of GCRA keys (take_gcra.lua).
  if slack > 0 then
    redis.call('SET', key, value, 'PX', math.ceil((tat - now) / 1000) + slack)
  else
    redis.call('SET', key, value, 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
  end
  return 1
end

local per, target = tonumber(ARGV[5]), tonumber(ARGV[6])
if algo == SLIDING_LOG then
  -- Sliding log (take.lua): members are "instant:cost:id", in order of
  -- instant, each scored with the running total of the costs up to it.
  -- Add a filler at now so that the cost in (now - Per, now] is at least
  -- target: it goes after the entries at or before now, and the later
  -- ones (reservations) move up by its cost.
  local entries = redis.call('ZCARD', key)
  -- upto(instant) is how many entries are at or before instant: a
  -- prefix, found by binary search over ranks.
  local function upto(instant)
    local low, high = 0, entries
    while low < high do
      local mid = floor((low + high) / 2)
      local member = redis.call('ZRANGE', key, mid, mid)[1]
      if tonumber(string.match(member, '^%d+')) <= instant then low = mid + 1 else high = mid end
    end
    return low
  end
  -- before(rank) is the running total before the entry of rank (0-based).
  local function before(rank)
    if rank > 0 then
      return tonumber(redis.call('ZRANGE', key, rank - 1, rank - 1, 'WITHSCORES')[2])
    end
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if not first[1] then return 0 end
    return tonumber(first[2]) - tonumber(string.match(first[1], '^%d+:(%d+):'))
  end
  local rank = upto(now)
  local base = before(rank)
  local fill = target - (base - before(upto(now - per)))
  if fill <= 0 then return 0 end
  local later = redis.call('ZRANGE', key, rank, -1, 'WITHSCORES')
  -- One ZADD per 500 entries (unpack's limit is a few thousand).
  for from = 1, #later, 1000 do
    local zargs = {}
    for x = from, math.min(from + 998, #later - 1), 2 do
      zargs[#zargs + 1] = fmt('%d', tonumber(later[x + 1]) + fill)
      zargs[#zargs + 1] = later[x]
    end
    redis.call('ZADD', key, unpack(zargs))
  end
  redis.call('ZADD', key, fmt('%d', base + fill), fmt('%d:%d:%s', now, fill, callID))
  extend(math.ceil(per / 1000) + slack)
  return 1
end

-- Fixed and sliding window: raise the current window's count to target.
-- The key lives to the end of the window (one window longer for the
-- sliding window, which reads it as the previous window).
local window = floor(now / per)
local field = fmt('%d', window)
local count = tonumber(redis.call('HGET', key, field)) or 0
if count >= target then return 0 end
redis.call('HINCRBY', key, field, target - count)
local ends = (window + 1) * per
if algo == SLIDING_WINDOW then ends = ends + per end
extend(math.ceil((ends - now) / 1000) + slack)
return 1
