-- share_floor.lua: a measurement of the least a lone tenant decision can
-- cost Redis, not a script of the store (nothing embeds it). It is
-- take_share.lua's grant of one GCRA limit with the fair share kept in
-- one hash per counter, the cheapest exact layout found (BENCHMARKS.md,
-- "A lone tenant decision: the floor"), with everything a real script
-- needs beyond the grant itself left out:
--
--   'a'..tenant  its last demand, µs; the field exists only while the
--                tenant is active, so HSET's reply says whether it just
--                became active (no read of it)
--   'v'..tenant  its share clock, µs
--   '#'          n + X: the active tenants' count n (< 4096) and X, a
--                multiple of 4096 µs no later than the earliest instant
--                at which an active tenant stops being active (or a claim
--                may be live): before X the count needs no ZCOUNT
--
-- Left out (each costs more): the recount when now >= X, a tenant
-- becoming active (the count's write), claims, the key's expiry, the
-- share's index, unit, ahead, claim and wait arguments (unit and ahead
-- can be derived from the limit's charge and allowance) and the claims'
-- two keys. So what it measures is a floor: reading the two values a
-- grant needs (the clock, the count) and writing the two it changes
-- (the last demand, the clock), one key and two arguments more than
-- take_gcra.lua.
--
-- redisstore/testdata/callgrind.sh redisstore/testdata/share_floor.lua 3000 3 p k z "" "" 1 1 999 acme 1000000
--
-- KEYS: the pause key if any, the limit's key, the hash.
-- ARGV[3] MaxWait, ARGV[4], ARGV[5] the limit's charge and allowance
-- (take_gcra.lua's), ARGV[6] the tenant, ARGV[7] Per.

local limits = (#ARGV - 5) / 2
local e = 3 + 2 * limits
local pauses = #KEYS - limits - 1
local MAX_SHARE_STEP = 1125899906842624
-- #include gcra_read.lua
local key, tenant = KEYS[first + limits], ARGV[e + 1]
local vclock = 'v' .. tenant
local got = redis.call('HMGET', key, vclock, '#')
local state = (got[2] or 0) + 0
local n = state % 4096
if now >= state - n then
  -- The recount would run here; this measurement only sets '#' (once,
  -- on the first call) so that the calls counted take the fast path.
  n = 1
  redis.call('HSET', key, '#', fmt('%d', now - now % 4096 + 4096 * 1000000000 + 1))
end
local clock = (got[1] or 0) + 0
if instant > now and instant - now > ARGV[3] + 0 then
  return fmt('0 %d %d %d', instant - now, binding, pause)
end
-- #include gcra_charge.lua
if clock < instant then clock = instant end
local ahead = instant + ARGV[4] + ARGV[5]
if clock > ahead then clock = ahead end
local step = ARGV[4] * n
if step > MAX_SHARE_STEP then step = MAX_SHARE_STEP end
clock = clock + step
local added = redis.call('HSET', key, 'a' .. tenant, fmt('%d', now), vclock, fmt('%d', clock))
if got[1] then added = added - 1 end
if added ~= 0 then
  -- Newly active: the count would be written here (not in the calls
  -- counted).
end
if instant == now and old1 <= now and old2 <= now then
  return tat1
end
return fmt('1 %d -1 -1 %d -1 %d', instant - now, now, tat1)
