-- renew.lua: extend the Concurrency leases of one granted decision.
--
-- Units: integer microseconds of Redis's clock, as in take.lua. KEYS: the
-- reservation's concurrency keys (zsets of lease id -> expiry µs), all in
-- the one hash tag {S}.
--
-- ARGV[1]      "" to read TIME; tests may pass the current instant instead
-- ARGV[2]      the lease id
-- ARGV[2 + i]  the lease time (Per) of KEYS[i], µs
--
-- A lease still held (expiry after now) gets expiry max(old, now + Per): a
-- renewal never shortens a lease. A lease that is gone (released, or
-- never claimed: see claim.lua), or expired but not yet pruned, is not
-- taken again (another demand may hold the slot by now); an expired one
-- is pruned. The key's TTL is raised to cover the new expiry (it already
-- has one: take.lua or claim.lua set it).
--
-- Reply: 0 if every lease was renewed, else the 1-based index of the first
-- key whose lease was lost.

local fmt = string.format
local now, slack
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  slack = 0
else
  now = tonumber(ARGV[1])
  slack = 3600000
end

local lost = 0
for i = 1, #KEYS do
  local key = KEYS[i]
  local old = tonumber(redis.call('ZSCORE', key, ARGV[2]))
  if old and old > now then
    local exp = now + tonumber(ARGV[2 + i])
    if exp > old then
      redis.call('ZADD', key, 'XX', fmt('%d', exp), ARGV[2])
      redis.call('PEXPIRE', key, math.ceil((exp - now) / 1000) + slack, 'GT')
    end
  else
    if old then redis.call('ZREM', key, ARGV[2]) end
    if lost == 0 then lost = i end
  end
end
return lost
