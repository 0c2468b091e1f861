-- share_state.lua: what take.lua (share.lua) and take_share.lua share of
-- fair shares: the bounds, the reading of the claims and the expiry of the
-- shares key, whose layout share.lua describes. It is no script of its
-- own: scripts.go puts it after prologue.lua in both.
--
-- Units as in prologue.lua.

local MAX_SHARE_STEP = 1125899906842624 -- 2^50 (quotamath.MaxShareStep)
local CLAIM_GRACE = 250000 -- µs (quotamath.ClaimGrace)

-- shareHeld reads the live claims of share's counter (those not lapsed:
-- others' lapsed ones are dropped) for share.tenant, whose place is
-- place: the place of its own live claim, if it has one, replaces it.
-- It returns the place, and when other tenants' live claims at a lower
-- place hold the demand back, until when: T after the latest of their
-- instants, or after now if that is later. Only when '#c' says a claim
-- may be live (the same in take_share.lua).
local function shareHeld(claims, ends, tenant, place, claim)
  local span = claim
  if span < CLAIM_GRACE then span = CLAIM_GRACE end
  local gone = redis.call('ZRANGE', ends, '-inf', fmt('%d', now - span), 'BYSCORE')
  if #gone > 0 then
    redis.call('ZREM', ends, unpack(gone))
    redis.call('ZREM', claims, unpack(gone))
  end
  local waiting = redis.call('ZSCORE', claims, tenant)
  if waiting then place = tonumber(waiting) end -- a waiting tenant keeps its place
  local lower = redis.call('ZRANGE', claims, '-inf', fmt('(%d', place), 'BYSCORE')
  local last
  for _, other in ipairs(lower) do
    if other ~= tenant then
      local at = tonumber(redis.call('ZSCORE', ends, other))
      if not last or at > last then last = at end
    end
  end
  if last then
    if last < now then last = now end
    return place, last + claim
  end
  return place, nil
end

-- shareExpire makes the shares key, written just before, live at least
-- until the end of the second after the one holding need (or for need -
-- now, and slack, under a test clock). bound is the latest of the tenant's
-- last demand + Per and its share clock as read (nil if neither was
-- there): each was written with such an expiry and none is ever
-- shortened (GT), so PEXPIREAT is sent only when need lies in a later
-- second than bound, about once a second.
local function shareExpire(key, need, bound)
  if slack > 0 then
    local ttl = math.ceil((need - now) / 1000) + slack
    if redis.call('PEXPIRE', key, ttl, 'GT') == 0 then redis.call('PEXPIRE', key, ttl, 'NX') end
  elseif not bound or floor(need / GRID) > floor(bound / GRID) then
    local at = fmt('%d', (floor(need / GRID) + 2) * 1000)
    if redis.call('PEXPIREAT', key, at, 'GT') == 0 then redis.call('PEXPIREAT', key, at, 'NX') end
  end
end
