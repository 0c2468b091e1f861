-- claim.lua: take the Concurrency slots of a reservation that came due.
--
-- take.lua grants a demand that must wait (a reservation) without taking
-- its slots, so that a request waiting for its rate quota holds no slot
-- meanwhile. When the reservation comes due, this script takes one slot of
-- every Concurrency limit of it, all or none.
--
-- Units: integer microseconds of Redis's clock, as in take.lua. KEYS: the
-- reservation's concurrency keys (P v1:{S}:c:NAME:KEY, zsets of lease id ->
-- expiry µs), all in the one hash tag {S}.
--
-- ARGV[1]          "" to read TIME; tests may pass the current instant
--                  instead
-- ARGV[2]          the lease id (the reservation's decision id)
-- ARGV[3]          number of leases released earlier, carried by this
--                  call (as in take.lua): their keys come last in KEYS,
--                  and 2 arguments each (lease id, channel) last in ARGV
-- ARGV[2 + 2*i]    the lease time (Per) of KEYS[i], µs
-- ARGV[3 + 2*i]    the slots (Rate) of KEYS[i]
--
-- Every key must have a free slot now: fewer than Rate leases whose expiry
-- is after now (expired ones are pruned when the set looks full, as in
-- take.lua). Then each gets the lease id with expiry now + Per, and the
-- key's TTL covers it. A key that already holds the id, live, needs no
-- free slot and its lease is extended, never shortened: a call that
-- go-redis sends again runs as the first did, so claims need no resend
-- mark (like release.lua and renew.lua).
--
-- Reply: {1, expiry...} (one expiry per key, in order) when every slot was
-- taken, or {0, delay, i} when none was: KEYS[i] (1-based) has no free
-- slot, and delay is the time until its leases, if none is released or
-- renewed, have expired far enough for one to be free.

local fmt = string.format
local now, slack
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  slack = 0
else
  -- A client-given instant need not advance with Redis's clock, so keys
  -- get an hour of extra life (tests only).
  now = tonumber(ARGV[1])
  slack = 3600000
end

-- Carried releases first (as in release.lua); a second run is a no-op.
local nr = tonumber(ARGV[3])
for k = #KEYS - nr + 1, #KEYS do
  local x = #ARGV - 2 * (#KEYS - k) - 1
  if redis.call('ZREM', KEYS[k], ARGV[x]) == 1 then redis.call('PUBLISH', ARGV[x + 1], '1') end
end

local id = ARGV[2]
local nc = #KEYS - nr
local held, size = {}, {}
for i = 1, nc do
  local key = KEYS[i]
  local old = tonumber(redis.call('ZSCORE', key, id))
  if old and old > now then
    held[i] = old
  else
    local n, slots = redis.call('ZCARD', key), tonumber(ARGV[3 + 2 * i])
    if n >= slots then
      n = n - redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now))
    end
    if n >= slots then
      local e = tonumber(redis.call('ZRANGE', key, n - slots, n - slots, 'WITHSCORES')[2])
      return {0, e - now, i}
    end
    size[i] = n
  end
end

local r = {1}
for i = 1, nc do
  local key = KEYS[i]
  local exp = now + tonumber(ARGV[2 + 2 * i])
  if held[i] and held[i] > exp then exp = held[i] end
  redis.call('ZADD', key, fmt('%d', exp), id)
  local ms = math.ceil((exp - now) / 1000) + slack
  if size[i] == 0 then
    redis.call('PEXPIRE', key, ms) -- a new key, which has no TTL yet
  else
    redis.call('PEXPIRE', key, ms, 'GT')
  end
  r[1 + i] = exp
end
return r
