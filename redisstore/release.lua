-- release.lua: free the Concurrency slots of one granted decision.
--
-- KEYS: the reservation's concurrency keys (P v1:{S}:c:NAME:KEY, zsets of
-- lease id -> expiry µs), all in the one hash tag {S}.
--
-- ARGV[1]      the lease id (the decision id that take.lua or claim.lua
--              added)
-- ARGV[1 + i]  the channel announcing releases of KEYS[i] (P v1:{S}:n:...)
--
-- Removing by id makes a second release, or a release after the lease
-- expired and was pruned, a no-op: a slot is never freed twice. Only an
-- actual removal is announced, with PUBLISH, so waiters subscribed to the
-- channel wake at once instead of polling. A zset whose last lease goes is
-- deleted by Redis itself, so no key outlives its leases.
--
-- Reply: the number of leases removed.

local n = 0
for i = 1, #KEYS do
  if redis.call('ZREM', KEYS[i], ARGV[1]) == 1 then
    n = n + 1
    redis.call('PUBLISH', ARGV[1 + i], '1')
  end
end
return n
