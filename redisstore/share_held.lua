-- share_held.lua: reads the live claims of a counter shared among tenants
-- (share.lua's layout) for a demand of tenant: others' lapsed claims are
-- dropped, the place of the tenant's own live claim, if it has one,
-- replaces place, and when other tenants' live claims at a lower place
-- hold the demand back, held is until when: T after the latest of their
-- instants, or after now if that is later. Run only when '#c' says a
-- claim may be live. A block of code, no function (a closure costs
-- Redis instructions on every call, claims or not): scripts.go puts its
-- text in place of the line "-- #include share_held.lua" in share.lua
-- and take_share.lua.
--
-- In: claims, ends (the keys), tenant, claim (T, rounded up); place and
-- held, locals of the includer (held nil), which it sets.
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
  held = last + claim
end
