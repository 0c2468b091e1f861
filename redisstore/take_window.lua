-- take_window.lua: take.lua for a demand of one fixed-window or sliding-
-- window limit, at most one pause key and no reply to remember (Take picks
-- it then). It makes the same decision and charges the same key with the
-- same count and TTL as take.lua, in fewer Redis commands: a fixed window
-- with room costs TIME and one HINCRBY, a sliding window TIME, one HMGET
-- and one HINCRBY (Redis runs scripts on its only thread, so every
-- redis.call and every number parsed or formatted shows in throughput).
--
-- Units: integer microseconds of Redis's clock, as in take.lua.
--
-- KEYS: the pause key if any, then the limit's key (a hash: window index
-- -> count, keys.go). Both share the hash tag {scope}; no other key is
-- touched.
--
-- ARGV[1]  algorithm: 1 fixed window, 3 sliding window (take.lua's codes);
--          "R" when go-redis sends the call again (ReplayDetect, resend.go):
--          refused with an error beginning "RESENT", nothing decided
-- ARGV[2]  MaxWait
-- ARGV[3]  Per
-- ARGV[4]  Rate
-- ARGV[5]  cost (at most Rate; Go checks)
-- ARGV[6]  only from tests: the current instant to use instead of TIME
--
-- Reply: an integer when granted at once: the window index charged.
-- Otherwise a string of integers, "1 delay -1 -1 window" when granted,
-- "0 delay limit pause" when refused (take_gcra.lua's format).

local fixed = ARGV[1] == '1'
if not fixed and ARGV[1] ~= '3' then
  return redis.error_reply('RESENT: call sent again, not decided again')
end
local now, slack
if #ARGV == 5 then
  local tm = redis.call('TIME')
  now = tm[1] * 1000000 + tm[2]
  slack = 0
else
  -- A client-given instant need not advance with Redis's clock, so keys
  -- get an hour of extra life (tests only), as in take.lua.
  now = tonumber(ARGV[6])
  slack = 3600000
end
local fmt, floor = string.format, math.floor

local t, pause = now, -1
local key = KEYS[1]
if #KEYS == 2 then
  local p = tonumber(redis.call('GET', key))
  if p and p > t then t, pause = p, 0 end
  key = KEYS[2]
end
-- MaxWait is parsed only when there is a wait, and the cost goes to
-- HINCRBY as it came (Redis formats a Lua number with %.17g, which costs
-- more than the parse saved).
local per, rate, cost = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local k = floor(t / per)
local n, binding = nil, -1

if fixed then
  if t == now or t - now <= tonumber(ARGV[2]) then
    -- Charge the window of t, and give the cost back if that overfills
    -- it (nothing is charged on refusal): one command when there is room.
    n = redis.call('HINCRBY', key, fmt('%d', k), ARGV[5])
    if n > rate then
      redis.call('HINCRBY', key, fmt('%d', k), fmt('%d', -cost))
      n, k = nil, k + 1
    end
  end
  if not n then
    -- The first window from k with room for the cost sets the instant.
    local room = rate - cost
    while (tonumber(redis.call('HGET', key, fmt('%d', k))) or 0) > room do
      k = k + 1
    end
    if k * per > t then t, binding = k * per, 0 end
  end
else
  -- Sliding window: the first instant from t, in window k or later, at
  -- which prev*(P-x) + (cur+cost)*P <= Rate*P, x the offset into the
  -- window (take.lua's search).
  local room0 = rate - cost
  while true do
    local start = k * per
    local v = redis.call('HMGET', key, fmt('%d', k - 1), fmt('%d', k))
    local room = room0 - (tonumber(v[2]) or 0)
    if room >= 0 then
      local x = t - start
      if x < 0 then x = 0 end
      local prev = tonumber(v[1]) or 0
      if prev > 0 then
        local y = per - floor(room * per / prev)
        if y > x then x = y end
      end
      if x < per then
        if start + x > t then t, binding = start + x, 0 end
        break
      end
    end
    k = k + 1
  end
end
if t > now and t - now > tonumber(ARGV[2]) then
  return fmt('0 %d %d %d', t - now, binding, pause)
end
if not n then
  n = redis.call('HINCRBY', key, fmt('%d', k), ARGV[5])
end

if n == cost then
  -- A new window (once per window and key): extend the TTL to its end
  -- (one window later for the sliding window, which reads it as the
  -- previous one), and drop windows that have passed (as take.lua does).
  local ends = (k + 1) * per
  if not fixed then ends = ends + per end
  local ms = math.ceil((ends - now) / 1000) + slack
  if redis.call('PEXPIRE', key, ms, 'NX') == 0 then
    redis.call('PEXPIRE', key, ms, 'GT')
  end
  if redis.call('HLEN', key) > 3 then
    local keep = floor(now / per)
    if not fixed then keep = keep - 1 end
    for _, f in ipairs(redis.call('HKEYS', key)) do
      if tonumber(f) < keep then redis.call('HDEL', key, f) end
    end
  end
end
if t == now then return k end
return fmt('1 %d -1 -1 %d', t - now, k)
