-- pause.lua: hold back a pause key of one scope for a duration, counted
-- from Redis's clock. A pause never shortens an existing one.
--
-- KEYS[1]  the pause key; its value is the pause end in microseconds of
--          Redis's clock, and it expires then (ms, rounded up)
-- ARGV[1], ARGV[2]  the clock and "" (prologue.lua)
-- ARGV[3]  the duration, microseconds (positive)
--
-- Reply: 1 if the pause was set or lengthened, 0 if it already lasted as
-- long.

local duration = tonumber(ARGV[3])
local ends = now + duration
local current = tonumber(redis.call('GET', KEYS[1]))
if not current or ends > current then
  redis.call('SET', KEYS[1], fmt('%d', ends), 'PX', math.ceil(duration / 1000) + slack)
  return 1
end
return 0
