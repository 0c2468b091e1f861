-- pause.lua: hold back a pause key of one scope for a duration, counted
-- from Redis's clock. A pause never shortens an existing one.
--
-- KEYS[1]  the pause key; its value is the pause end in microseconds of
--          Redis's clock, and it expires then (ms, rounded up)
-- ARGV[1]  "" to read TIME; tests may pass the current instant instead
-- ARGV[2]  the duration, microseconds (positive)

local now, slack
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  slack = 0
else
  now = tonumber(ARGV[1])
  slack = 3600000
end
local d = tonumber(ARGV[2])
local ends = now + d
local cur = tonumber(redis.call('GET', KEYS[1]))
if not cur or ends > cur then
  redis.call('SET', KEYS[1], string.format('%d', ends), 'PX', math.ceil(d / 1000) + slack)
  return 1
end
return 0
