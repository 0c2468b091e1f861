-- share_state.lua: the bounds of fair shares (share.lua's layout), for
-- take.lua (share.lua) and take_share.lua, and for the blocks they
-- include, share_held.lua and share_expire.lua. It is no script of its
-- own: scripts.go puts it after prologue.lua in both.

local MAX_SHARE_STEP = 1125899906842624 -- 2^50 (quotamath.MaxShareStep)
local CLAIM_GRACE = 250000 -- µs (quotamath.ClaimGrace)
