-- release.lua: free the Concurrency slots of released leases.
--
-- KEYS: the concurrency keys (P v1:{S}:c:NAME:KEY, zsets of lease id ->
-- expiry µs), all in the one hash tag {S}; a key may appear more than
-- once, for leases of different ids.
--
-- ARGV[1], ARGV[2]  the clock (unused) and "" (prologue.lua)
-- ARGV[2*k + 1]     the lease id to remove from KEYS[k] (the decision id
--                   that take.lua or claim.lua added)
-- ARGV[2*k + 2]     the channel announcing releases of KEYS[k]
--                   (P v1:{S}:n:...)
--
-- This is the layout of the releases that take.lua and claim.lua carry at
-- the end of their keys and arguments (releases.go): those scripts apply
-- them with the same loop. Removing by id makes a second release, or a
-- release after the lease expired and was pruned, a no-op: a slot is never
-- freed twice. Only an actual removal is announced, with PUBLISH, so
-- waiters subscribed to the channel wake at once instead of polling. A
-- zset whose last lease goes is deleted by Redis itself, so no key
-- outlives its leases.
--
-- Reply: the number of leases removed.

local removed = 0
for k = 1, #KEYS do
  local lease = 2 * k + 1
  if redis.call('ZREM', KEYS[k], ARGV[lease]) == 1 then
    removed = removed + 1
    redis.call('PUBLISH', ARGV[lease + 1], '1')
  end
end
return removed
