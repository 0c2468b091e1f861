-- gcra_read.lua: reads a demand of at most one pause key and one or two
-- GCRA limits in whole microseconds (KEYS: the pause key if pauses is 1,
-- then the limits' keys; ARGV[5] and ARGV[7]: each limit's room), in
-- straight lines: the earliest instant the pause and every limit admit
-- the demand, which of them binds it, and the limits' arrival times. The
-- one copy of that reading for take_gcra.lua and take_share.lua; a block
-- of code, no function (see share_held.lua): scripts.go puts its text in
-- place of the line "-- #include gcra_read.lua".
--
-- In: pauses, limits. Out: instant, pause (0: the pause binds, else -1),
-- first (the index in KEYS of the first limit's key), old1, old2,
-- binding (the limit that binds, from 0, or -1).
local instant, pause, first = now, -1, 1
if pauses == 1 then
  local pauseEnd = tonumber(redis.call('GET', KEYS[1]))
  if pauseEnd and pauseEnd > instant then instant, pause = pauseEnd, 0 end
  first = 2
end
-- A limit binds only when its arrival time is past the instant: the
-- allowance is never negative (a demand's cost plus its headroom is at
-- most the limit's capacity, quota.Demand.Validate), so an idle bucket's
-- allowance is not read (one number less to parse).
local old1 = tonumber(redis.call('GET', KEYS[first])) or 0
local old2, binding = 0, -1
if old1 > instant then
  local earliest = old1 - ARGV[5]
  if earliest > instant then instant, binding = earliest, 0 end
end
if limits == 2 then
  old2 = tonumber(redis.call('GET', KEYS[first + 1])) or 0
  if old2 > instant then
    local earliest = old2 - ARGV[7]
    if earliest > instant then instant, binding = earliest, 1 end
  end
end
