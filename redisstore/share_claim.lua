-- share_claim.lua: records the claim of a tenant's demand refused until
-- refused (share.lua's layout): its place in the claims and the instant
-- in the ends, both kept span after refused (at least CLAIM_GRACE). The
-- one copy of that write for share.lua, take_share.lua and
-- take_share_batch.lua; a block of code, no function (see
-- share_held.lua): scripts.go puts its text in place of the line
-- "-- #include share_claim.lua".
--
-- In: claims, ends (the keys), place, tenant, refused, span (the claim's
-- T), now, slack. Out: span, at least CLAIM_GRACE.
if span < CLAIM_GRACE then span = CLAIM_GRACE end
redis.call('ZADD', claims, fmt('%d', place), tenant)
redis.call('ZADD', ends, fmt('%d', refused), tenant)
local ttl = math.ceil((refused + span - now) / 1000) + slack
if redis.call('PEXPIRE', claims, ttl, 'NX') == 0 then redis.call('PEXPIRE', claims, ttl, 'GT') end
if redis.call('PEXPIRE', ends, ttl, 'NX') == 0 then redis.call('PEXPIRE', ends, ttl, 'GT') end
