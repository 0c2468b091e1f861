-- share_step.lua: moves a tenant's share clock for a grant at instant
-- (share.lua's rule, internal/quotamath's): min(max(clock, instant),
-- instant + C*T) + min(unit*n, 2^50). The one copy of that rule for
-- share.lua, take_share.lua and take_share_batch.lua; a block of code, no
-- function (see share_held.lua): scripts.go puts its text in place of the
-- line "-- #include share_step.lua".
--
-- In: clock, instant, ahead (C*T), unit (cost*T), n (the active
-- tenants). Out: clock.
if clock < instant then clock = instant end
if clock > instant + ahead then clock = instant + ahead end
local step = unit * n
if step > MAX_SHARE_STEP then step = MAX_SHARE_STEP end
clock = clock + step
