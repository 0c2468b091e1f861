-- share_expire.lua: makes the shares key of a counter shared among
-- tenants (share.lua's layout), written just before, live at least until
-- the end of the second after the one holding need (or for need - now,
-- and slack, under a test clock). bound is the latest of the tenant's last
-- demand + Per and its share clock as read (nil if neither was there):
-- each was written with such an expiry and none is ever shortened (GT),
-- so PEXPIREAT is sent only when need lies in a later second than bound,
-- about once a second. A block of code, no function (see
-- share_held.lua): scripts.go puts its text in place of the line
-- "-- #include share_expire.lua".
--
-- In: key, need, bound.
if slack > 0 then
  local ttl = math.ceil((need - now) / 1000) + slack
  if redis.call('PEXPIRE', key, ttl, 'GT') == 0 then redis.call('PEXPIRE', key, ttl, 'NX') end
elseif not bound or need - need % GRID > bound - bound % GRID then
  -- x - x % GRID is floor(x / GRID) * GRID without math.floor's call.
  local at = fmt('%d', (need - need % GRID) / 1000 + 2000)
  if redis.call('PEXPIREAT', key, at, 'GT') == 0 then redis.call('PEXPIREAT', key, at, 'NX') end
end
