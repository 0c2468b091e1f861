-- renew.lua: extend the Concurrency leases of one granted decision.
--
-- Units as in prologue.lua. KEYS: the reservation's concurrency keys
-- (zsets of lease id -> expiry µs), all in the one hash tag {S}.
--
-- ARGV[1], ARGV[2]  the clock and the lease id (prologue.lua)
-- ARGV[2 + i]       the lease time (Per) of KEYS[i], µs
--
-- A lease still held (expiry after now) gets expiry max(old, now + Per): a
-- renewal never shortens a lease. A lease that is gone (released, or
-- never claimed: see claim.lua), or expired but not yet pruned, is not
-- taken again (another demand may hold the slot by now); an expired one
-- is pruned. The key's TTL is raised to cover the new expiry (it already
-- has one: take.lua or claim.lua set it). A call sent again runs as the
-- first did, so renewals need no resend mark.
--
-- Reply: 0 if every lease was renewed, else the 1-based index of the first
-- key whose lease was lost.

local lost = 0
for i = 1, #KEYS do
  local key = KEYS[i]
  local expiry = tonumber(redis.call('ZSCORE', key, callID))
  if expiry and expiry > now then
    local renewed = now + tonumber(ARGV[2 + i])
    if renewed > expiry then
      redis.call('ZADD', key, 'XX', fmt('%d', renewed), callID)
      redis.call('PEXPIRE', key, math.ceil((renewed - now) / 1000) + slack, 'GT')
    end
  else
    if expiry then redis.call('ZREM', key, callID) end
    if lost == 0 then lost = i end
  end
end
return lost
