-- take_share.lua: take.lua for a demand of one or two GCRA limits, one of
-- them shared among tenants (quota.Bucket.Tenant), at most one pause key,
-- whole microseconds and no reply to remember (Take picks it then). It
-- makes the same decision as take.lua with share.lua and writes the same
-- keys with the same values: the GCRA keys as take_gcra.lua does, the
-- fair share's state as share.lua describes it. Kept apart so that a
-- tenant's decision costs Redis what a plain one does (take_gcra.lua)
-- and three commands more while no claim is live: one ZMSCORE (the
-- tenant's last demand and share clock, and the claims' lapse), one
-- ZCOUNT (the active tenants) and one ZADD (its demand and clock);
-- PEXPIREAT about once a second, ZREMRANGEBYSCORE when a tenant becomes
-- active. share_held.lua and share_expire.lua are share.lua's too.
--
-- Units as in prologue.lua.
--
-- KEYS: the pause key if any, then one key per limit, then the shared
-- limit's three fair-share keys: shares, claims, ends (share.lua). All
-- share one hash tag {scope}; no other key is touched.
--
-- ARGV[1], ARGV[2]  the clock and "" (prologue.lua)
-- ARGV[3]  MaxWait, at most T/2 (quotamath.RestrictedWait)
-- then 2 per limit, as take_gcra.lua's: charge = cost*T, allowance =
--          (Burst-h)*T - cost*T, limit i's at ARGV[2 + 2*i], ARGV[3 + 2*i]
-- then the shared limit's entry, share.lua's first seven arguments: its
--          index (1-based), the tenant, unit, ahead, window, claim, wait
--
-- Reply: take_gcra.lua's.

local limits = (#ARGV - 10) / 2
local e = 4 + 2 * limits -- the entry's first argument
local pauses = #KEYS - limits - 3 -- the pause key, then the limits and 3 keys of the share
-- #include gcra_read.lua

-- The fair share (share.lua's sharesBegin, for one tenant).
-- Numbers are read with Lua's own coercion (a string in arithmetic), not
-- tonumber or math.max: each call of a C function costs Redis about 1300
-- instructions (BENCHMARKS.md, sixth round).
local key, tenant, window = KEYS[first + limits], ARGV[e + 1], ARGV[e + 4] + 0
local active, vclock = 'a' .. tenant, 'v' .. tenant
local got = redis.call('ZMSCORE', key, active, vclock, '#c')
local seen, since = got[1], now - window
if seen then seen = seen + 0 end
if since < -1 then since = -1 end
local n = redis.call('ZCOUNT', key, fmt('(%d', since), '+inf')
if not seen or seen <= now - window then
  n = n + 1
  redis.call('ZREMRANGEBYSCORE', key, fmt('%d', -now), fmt('%d', now - window))
end
local clock, lapse = 0, 0
if got[2] then clock = -got[2] end
if got[3] then lapse = -got[3] end
local bound = seen and seen + window -- share_expire.lua's
if got[2] and (not bound or clock > bound) then bound = clock end
local place, held = clock, nil
if place < now then place = now end
if lapse > now then
  local claims, ends, claim = KEYS[first + limits + 1], KEYS[first + limits + 2], tonumber(ARGV[e + 5])
  -- #include share_held.lua
end

if held or (instant > now and instant - now > ARGV[3] + 0) then
  -- Refused (share.lua's sharesRefusal): until the claims holding it
  -- back let it go, if later than the limits do.
  local refused = instant
  if held and held >= refused then refused, binding, pause = held, ARGV[e] - 1, -1 end
  local need = now + window
  if refused - now <= tonumber(ARGV[e + 6]) then
    local claims, ends, span = KEYS[first + limits + 1], KEYS[first + limits + 2], tonumber(ARGV[e + 5])
    -- #include share_claim.lua
    if refused + span > lapse then
      lapse = refused + span
      redis.call('ZADD', key, fmt('%d', now), active, fmt('%d', -lapse), '#c')
      if lapse > need then need = lapse end
    else
      redis.call('ZADD', key, fmt('%d', now), active)
    end
  else
    redis.call('ZADD', key, fmt('%d', now), active)
  end
  -- #include share_expire.lua
  return fmt('0 %d %d %d', refused - now, binding, pause)
end

-- Granted: charge the limits (take_gcra.lua's rule), then the clock.
-- #include gcra_charge.lua
local ahead, unit = ARGV[e + 3] + 0, ARGV[e + 2] + 0
-- #include share_step.lua
redis.call('ZADD', key, fmt('%d', now), active, fmt('%d', -clock), vclock)
local need = now + window
if clock > need then need = clock end
-- #include share_expire.lua
if lapse > now then
  redis.call('ZREM', KEYS[first + limits + 1], tenant)
  redis.call('ZREM', KEYS[first + limits + 2], tenant)
end

if instant == now and old1 <= now and old2 <= now then
  return tat1 -- every bucket was idle: TAT = now + charge (take_gcra.lua)
end
if limits == 1 then return fmt('1 %d -1 -1 %d -1 %d', instant - now, now, tat1) end
return fmt('1 %d -1 -1 %d -1 %d %d', instant - now, now, tat1, tat2)
