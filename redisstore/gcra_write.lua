-- gcra_write.lua: writes a GCRA limit's arrival time tat (whole µs) to
-- key, which held old (0: none): INCRBY while the value stays in the
-- second of the expiry grid it was in (the key keeps its PXAT), else SET
-- with the grid's expiry (PX and slack under a test clock). The one copy
-- of that rule; a block of code, no function (see share_held.lua):
-- scripts.go puts its text in place of the line
-- "-- #include gcra_write.lua".
--
-- In: key, old, tat. (x - x % GRID is floor(x / GRID) * GRID, the start of
-- x's second, computed in place where math.floor would be a call.)
if slack > 0 then
  redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
elseif old > 0 and old - old % GRID == tat - tat % GRID then
  redis.call('INCRBY', key, fmt('%d', tat - old))
else
  redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
end
