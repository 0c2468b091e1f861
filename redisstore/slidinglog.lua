-- slidinglog.lua: take.lua's sliding logs with reservations ahead of the
-- instant being decided (a part of take.lua, see scriptParts in
-- scripts.go).
--
-- A log is a sorted set: member "instant:cost:id", score the running
-- total of the costs up to and including the entry, in order of instant
-- (take.lua). While no entry lies after the instant decided, take.lua
-- finds the earliest instant from two reads of the set. When entries
-- (reservations) lie after it, a demand may still go before them if it
-- leaves every window room: an entry at x lies in the windows (y-Per, y]
-- for y in [x, x+Per), and the largest of them ends at x or at an entry.
-- So x is admitted when the window ending at x holds at most the
-- allowance (Rate - headroom - cost), and no entry in (x, x+Per) ends a
-- window that holds more; the earliest such x is the instant asked or an
-- instant at which an entry leaves the window (its instant plus Per).
-- This is quotamath's slidingLogEarliest, which the differential tests
-- check it against: one pass over the entries, O(n), after one read of
-- the set. The new entry then goes in order, and the entries after it
-- move up by its cost.

-- logLoad reads the whole log of key: the instants, costs and members in
-- order, with their running totals, and base, the total before the first
-- entry (of entries pruned before). Entries at or before now-Per are few:
-- every charge prunes them.
local function logLoad(key)
  local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local lg = {at = {}, cost = {}, member = {}, score = {}}
  for x = 1, #all, 2 do
    local at, cost = string.match(all[x], '^(%d+):(%d+):')
    local n = #lg.at + 1
    lg.at[n], lg.cost[n], lg.member[n], lg.score[n] = tonumber(at), tonumber(cost), all[x], tonumber(all[x + 1])
  end
  lg.base = 0
  if #lg.at > 0 then lg.base = lg.score[1] - lg.cost[1] end
  return lg
end

-- logEarliest returns the earliest instant, not before t, at which the
-- loaded log lg admits a demand leaving room (the allowance) in every
-- window of length per that holds it.
local function logEarliest(lg, t, room, per)
  local at, cost = lg.at, lg.cost
  local n = #at
  local first = 1
  while first <= n and at[first] <= t - per do first = first + 1 end
  -- Two windows that only move forward: entries [lo, hi) are in them.
  -- a ends at the candidate, b at the entry checked ahead.
  local aLo, aHi, aSum, bLo, bHi, bSum = first, first, 0, first, first, 0
  local exit, ahead, x = first, first, t
  while true do
    local fits = true
    while ahead <= n and at[ahead] < x + per do
      local e = at[ahead]
      if e > x then
        while bHi <= n and at[bHi] <= e do bSum, bHi = bSum + cost[bHi], bHi + 1 end
        while bLo < bHi and at[bLo] <= e - per do bSum, bLo = bSum - cost[bLo], bLo + 1 end
        if bSum > room then
          fits, x = false, e -- no candidate up to e fits
          break
        end
      end
      ahead = ahead + 1
    end
    if fits then
      while aHi <= n and at[aHi] <= x do aSum, aHi = aSum + cost[aHi], aHi + 1 end
      while aLo < aHi and at[aLo] <= x - per do aSum, aLo = aSum - cost[aLo], aLo + 1 end
      if aSum <= room then return x end
    end
    while exit <= n and at[exit] + per <= x do exit = exit + 1 end
    if exit > n then return x end -- not reached: the cost is at most Rate
    x = at[exit] + per
  end
end

-- logInsert adds the entry member of cost at instant to the loaded log
-- of key: its score is the total up to the entries at or before instant
-- plus cost, and every later entry moves up by cost. Returns the new
-- total of the log.
local function logInsert(key, lg, instant, cost, member)
  local before, k = lg.base, 0
  while k < #lg.at and lg.at[k + 1] <= instant do
    k = k + 1
    before = lg.score[k]
  end
  -- One ZADD per 500 entries (unpack's limit is a few thousand).
  local zargs = {fmt('%d', before + cost), member}
  for x = k + 1, #lg.at do
    zargs[#zargs + 1] = fmt('%d', lg.score[x] + cost)
    zargs[#zargs + 1] = lg.member[x]
    if #zargs >= 1000 then
      redis.call('ZADD', key, unpack(zargs))
      zargs = {}
    end
  end
  if #zargs > 0 then redis.call('ZADD', key, unpack(zargs)) end
  if #lg.at == 0 then return before + cost end
  return lg.score[#lg.at] + cost
end
