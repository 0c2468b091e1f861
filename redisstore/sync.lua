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
-- ARGV[7]  windows: Rate
-- ARGV[8]  windows: the phase, or -1 for an Anchored limit (take.lua)
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

-- Fixed and sliding window: raise to target the count of the last window
-- that starts before the reset, now + within, and fill (count Rate)
-- every window from the one of now up to it: what they admitted before
-- the reset would count in the vendor's window too. The key lives to the
-- end of the last (one window longer for the sliding window, which reads
-- it as the previous window).
local rate, phase = tonumber(ARGV[7]), tonumber(ARGV[8])
local anchored = phase < 0
local expiry = 0
if anchored then
  -- The counter's phase (take.lua); one with no state starts its first
  -- window at now, as a first charge would.
  local st = redis.call('HMGET', key, 'a', 'e')
  phase, expiry = tonumber(st[1]), tonumber(st[2])
  if not phase or not expiry or expiry <= now then
    redis.call('DEL', key)
    phase, expiry = now % per, 0
    redis.call('HSET', key, 'a', fmt('%d', phase))
  end
end
local first = floor((now - phase) / per)
local last = floor((now + within - 1 - phase) / per)
local lowered = 0
for window = first, last do
  local field, want, at = fmt('%d', window), rate, window * per + phase
  if window == last then want = target end
  if at < now then at = now end
  local count = tonumber(redis.call('HGET', key, field)) or 0
  if count < want then
    redis.call('HINCRBY', key, field, want - count)
    lowered = 1
    if anchored and at > now then
      -- A later window's filler stands at its start (anchor.lua).
      local prev = tonumber(redis.call('HGET', key, field .. 'r'))
      if not prev or at > prev then redis.call('HSET', key, field .. 'r', fmt('%d', at)) end
    end
  end
end
local ends = (last + 1) * per + phase
if algo == SLIDING_WINDOW then ends = ends + per end
if anchored and ends > expiry then redis.call('HSET', key, 'e', fmt('%d', ends)) end
if lowered == 1 or anchored then extend(math.ceil((ends - now) / 1000) + slack) end
return lowered
