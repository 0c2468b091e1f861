-- gcra_charge.lua: charges a granted demand's GCRA limits, one or two,
-- as gcra_read.lua read them: each limit's arrival time moves to
-- max(old, instant) + its charge, written by gcra_write.lua's rule. The
-- one copy of that loop for take_gcra.lua and take_share.lua; a block
-- of code, no function (see share_held.lua): scripts.go puts its text in
-- place of the line "-- #include gcra_charge.lua".
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
  -- #include gcra_write.lua
  if i == 1 then tat1 = tat else tat2 = tat end
end
