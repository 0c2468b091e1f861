-- floor_gcra.lua: not a limiter, a yardstick. It is the least work a GCRA
-- decision on Redis's clock can do in one script call: read the clock
-- (TIME), read each limit's arrival time (GET), refuse if any limit is
-- full, else move each arrival time (INCRBY of the difference, which Redis
-- does in place). It keeps nothing a real limiter must: keys never expire,
-- there is no pause key, no wait (a full limit refuses), no retry time and
-- no protection against a call sent twice. The bench measures it beside
-- the contenders to show how far from this floor each one is.
--
-- Units: integer microseconds of Redis's clock.
-- KEYS: one per limit (one or two), sharing one hash tag.
-- ARGV: per limit, T (the emission interval) and Burst*T - T.
-- Reply: 1 granted, 0 refused.

local fmt = string.format
local tm = redis.call('TIME')
local now = tm[1] * 1000000 + tm[2]

local old1 = tonumber(redis.call('GET', KEYS[1])) or 0
local tat1 = old1
if tat1 < now then tat1 = now end
if tat1 - ARGV[2] > now then return 0 end
if #KEYS == 1 then
  redis.call('INCRBY', KEYS[1], fmt('%d', tat1 + ARGV[1] - old1))
  return 1
end

local old2 = tonumber(redis.call('GET', KEYS[2])) or 0
local tat2 = old2
if tat2 < now then tat2 = now end
if tat2 - ARGV[4] > now then return 0 end
redis.call('INCRBY', KEYS[1], fmt('%d', tat1 + ARGV[1] - old1))
redis.call('INCRBY', KEYS[2], fmt('%d', tat2 + ARGV[3] - old2))
return 1
