-- gcra_charge.lua: charges a granted demand's GCRA limits, one or two:
-- each limit's arrival time moves to max(old, instant) + its charge,
-- written as INCRBY while it stays within its second of the expiry grid
-- (the key keeps its PXAT), else SET with the grid's expiry (PX and slack
-- under a test clock). The one copy of that rule for take_gcra.lua and
-- take_share.lua; a block of code, no function (see share_held.lua):
-- scripts.go puts its text in place of the line
-- "-- #include gcra_charge.lua".
--
-- In: limits, old1, old2, instant, first (the index in KEYS of the first
-- limit's key). Out: tat1, tat2, the arrival times written.
local tat1, tat2
for i = 1, limits do
  local old = old1
  if i == 2 then old = old2 end
  local tat = old
  if tat < instant then tat = instant end
  tat = tat + ARGV[2 + 2 * i]
  local key = KEYS[first + i - 1]
  if slack > 0 then
    redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
  elseif old > 0 and floor(old / GRID) == floor(tat / GRID) then
    redis.call('INCRBY', key, fmt('%d', tat - old))
  else
    redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
  end
  if i == 1 then tat1 = tat else tat2 = tat end
end
