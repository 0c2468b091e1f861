-- sync.lua: lower one limit's counter to what the vendor says remains,
-- never raise it (throttle.Syncer).
--
-- Units: integer microseconds of Redis's clock (TIME); every value stays
-- below 2^53 (Go checks), so Lua's doubles are exact. Numbers written back
-- are formatted with '%d'.
--
-- KEYS[1]  the limit's key (layout in keys.go), in the scope's hash tag
-- ARGV[1]  "" to read TIME; tests may pass the current instant instead
-- ARGV[2]  algorithm: 0 GCRA, 1 fixed window, 2 sliding log, 3 sliding window
-- ARGV[3]  within: time until the vendor's reset (positive)
-- ARGV[4]  GCRA: (Burst - remaining) * T; others: Per
-- ARGV[5]  others: the count the current window (or the last Per of the
--          log) must reach, Rate - remaining
-- ARGV[6]  sliding log: a unique id for the filler entry's member
--
-- Reply: 1 if the counter was lowered, 0 if it already admitted no more.

local fmt = string.format
local now, slack
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  slack = 0
else
  now = tonumber(ARGV[1])
  slack = 3600000
end
local key, alg, within, a = KEYS[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

-- extend sets the key's TTL to at least ms, never shortening it.
local function extend(ms)
  if redis.call('PEXPIRE', key, ms, 'NX') == 0 then
    redis.call('PEXPIRE', key, ms, 'GT')
  end
end

if alg == '0' then
  -- GCRA: from now to the reset at most `remaining` units may pass, so
  -- the arrival time is at least now + within + (Burst - remaining) * T.
  local tat = now + within + a
  local cur = tonumber(redis.call('GET', key)) or 0
  if tat <= cur then return 0 end
  -- The expiry rule of GCRA keys (take_gcra.lua).
  if slack > 0 then
    redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
  else
    redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (math.floor(tat / 1000000) + 2) * 1000))
  end
  return 1
end

local target = tonumber(ARGV[5])
if alg == '2' then
  -- Sliding log (take.lua): members are "instant:cost:id", in order of
  -- instant, each scored with the running total of the costs up to it.
  -- Add a filler at now so that the cost in (now - Per, now] is at least
  -- target: it goes after the entries at or before now, and the later
  -- ones (reservations) move up by its cost.
  local n = redis.call('ZCARD', key)
  -- upto(x) is how many entries are at or before instant x: a prefix,
  -- found by binary search over ranks.
  local function upto(x)
    local lo, hi = 0, n
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      local m = redis.call('ZRANGE', key, mid, mid)[1]
      if tonumber(string.match(m, '^%d+')) <= x then lo = mid + 1 else hi = mid end
    end
    return lo
  end
  -- before(k) is the running total before the entry of rank k (0-based).
  local function before(k)
    if k > 0 then
      return tonumber(redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')[2])
    end
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if not first[1] then return 0 end
    return tonumber(first[2]) - tonumber(string.match(first[1], '^%d+:(%d+):'))
  end
  local p = upto(now)
  local base = before(p)
  local fill = target - (base - before(upto(now - a)))
  if fill <= 0 then return 0 end
  local later = redis.call('ZRANGE', key, p, -1, 'WITHSCORES')
  -- One ZADD per 500 entries (unpack's limit is a few thousand).
  for from = 1, #later, 1000 do
    local args = {}
    for x = from, math.min(from + 998, #later - 1), 2 do
      args[#args + 1] = fmt('%d', tonumber(later[x + 1]) + fill)
      args[#args + 1] = later[x]
    end
    redis.call('ZADD', key, unpack(args))
  end
  redis.call('ZADD', key, fmt('%d', base + fill), fmt('%d:%d:%s', now, fill, ARGV[6]))
  extend(math.ceil(a / 1000) + slack)
  return 1
end

-- Fixed and sliding window: raise window k's count to target. The key
-- lives to the end of window k (one window longer for the sliding
-- window, which reads it as the previous window).
local k = math.floor(now / a)
local field = fmt('%d', k)
local c = tonumber(redis.call('HGET', key, field)) or 0
if c >= target then return 0 end
redis.call('HINCRBY', key, field, target - c)
local ends = (k + 1) * a
if alg == '3' then ends = ends + a end
extend(math.ceil((ends - now) / 1000) + slack)
return 1
