-- take_fixed.lua: take.lua for a demand of one fixed-window limit, at most
-- one pause key and no reply to remember (Take picks it then). It makes
-- the same decision and charges the same key with the same count and TTL
-- as take.lua, in fewer Redis commands: TIME and one HINCRBY when the
-- current window has room (Redis runs scripts on its only thread, so every
-- redis.call and every number parsed or formatted shows in throughput).
--
-- Units: integer microseconds of Redis's clock, as in take.lua.
--
-- KEYS: the pause key if any, then the limit's key (a hash: window index
-- -> count, keys.go). Both share the hash tag {scope}; no other key is
-- touched.
--
-- ARGV[1]  MaxWait
-- ARGV[2]  Per
-- ARGV[3]  Rate
-- ARGV[4]  cost (at most Rate; Go checks)
-- ARGV[5]  only from tests: the current instant to use instead of TIME
--
-- Reply: an integer when granted at once: the window index charged.
-- Otherwise a string of integers, "1 delay -1 -1 window" when granted,
-- "0 delay limit pause" when refused (take_gcra.lua's format).

local now, slack
if #ARGV == 4 then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
  slack = 0
else
  -- A client-given instant need not advance with Redis's clock, so keys
  -- get an hour of extra life (tests only), as in take.lua.
  now = tonumber(ARGV[5])
  slack = 3600000
end
local fmt = string.format

local t, pause = now, -1
local key = KEYS[1]
if #KEYS == 2 then
  local p = tonumber(redis.call('GET', key))
  if p and p > t then t, pause = p, 0 end
  key = KEYS[2]
end
local maxWait, per, rate, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local k = math.floor(t / per)
local n
if t - now <= maxWait then
  -- Charge the window of t, and give the cost back if that overfills it
  -- (nothing is charged on refusal): one command when there is room.
  n = redis.call('HINCRBY', key, fmt('%d', k), cost)
  if n > rate then
    redis.call('HINCRBY', key, fmt('%d', k), -cost)
    n, k = nil, k + 1
  end
end
local binding = -1
if not n then
  -- The first window from k with room for the cost sets the instant.
  local room = rate - cost
  while (tonumber(redis.call('HGET', key, fmt('%d', k))) or 0) > room do
    k = k + 1
  end
  if k * per > t then t, binding = k * per, 0 end
  if t - now > maxWait then
    return fmt('0 %d %d %d', t - now, binding, pause)
  end
  n = redis.call('HINCRBY', key, fmt('%d', k), cost)
end

if n == cost then
  -- A new window (once per window and key): extend the TTL to its end,
  -- and drop windows that have passed (as take.lua does).
  local ms = math.ceil(((k + 1) * per - now) / 1000) + slack
  if redis.call('PEXPIRE', key, ms, 'NX') == 0 then
    redis.call('PEXPIRE', key, ms, 'GT')
  end
  if redis.call('HLEN', key) > 3 then
    local keep = math.floor(now / per)
    for _, f in ipairs(redis.call('HKEYS', key)) do
      if tonumber(f) < keep then redis.call('HDEL', key, f) end
    end
  end
end
if t == now then return k end
return fmt('1 %d -1 -1 %d', t - now, k)
