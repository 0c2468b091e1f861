-- claim.lua: take the Concurrency slots of a reservation that came due.
--
-- take.lua grants a demand that must wait (a reservation) without taking
-- its slots, so that a request waiting for its rate quota holds no slot
-- meanwhile. When the reservation comes due, this script takes one slot of
-- every Concurrency limit of it, all or none.
--
-- Units as in prologue.lua. KEYS: the reservation's concurrency keys
-- (P v1:{S}:c:NAME:KEY, zsets of lease id -> expiry µs), all in the one
-- hash tag {S}, then those of the carried releases.
--
-- ARGV[1], ARGV[2]  the clock and the lease id (the reservation's
--                   decision id) (prologue.lua)
-- ARGV[3]           number of leases released earlier, carried by this
--                   call (as in take.lua): their keys come last in KEYS,
--                   and 2 arguments each (lease id, channel) last in ARGV
-- ARGV[2 + 2*i]     the lease time (Per) of KEYS[i], µs
-- ARGV[3 + 2*i]     the slots (Rate) of KEYS[i]
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

-- Carried releases first (as in release.lua); a second run is a no-op.
local carried = tonumber(ARGV[3])
for k = #KEYS - carried + 1, #KEYS do
  local lease = #ARGV - 2 * (#KEYS - k) - 1
  if redis.call('ZREM', KEYS[k], ARGV[lease]) == 1 then redis.call('PUBLISH', ARGV[lease + 1], '1') end
end

local slotKeys = #KEYS - carried
local held, leases = {}, {} -- per key: the live expiry of this id; the number of leases
for i = 1, slotKeys do
  local key = KEYS[i]
  local expiry = tonumber(redis.call('ZSCORE', key, callID))
  if expiry and expiry > now then
    held[i] = expiry
  else
    local count, slots = redis.call('ZCARD', key), tonumber(ARGV[3 + 2 * i])
    if count >= slots then
      count = count - redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now))
    end
    if count >= slots then
      local frees = tonumber(redis.call('ZRANGE', key, count - slots, count - slots, 'WITHSCORES')[2])
      return {0, frees - now, i}
    end
    leases[i] = count
  end
end

local reply = {1}
for i = 1, slotKeys do
  local key = KEYS[i]
  local expiry = now + tonumber(ARGV[2 + 2 * i])
  if held[i] and held[i] > expiry then expiry = held[i] end
  redis.call('ZADD', key, fmt('%d', expiry), callID)
  local ttl = math.ceil((expiry - now) / 1000) + slack
  if leases[i] == 0 then
    redis.call('PEXPIRE', key, ttl) -- a new key, which has no TTL yet
  else
    redis.call('PEXPIRE', key, ttl, 'GT')
  end
  reply[1 + i] = expiry
end
return reply
