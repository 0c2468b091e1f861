-- slidinglog.lua: take.lua's sliding logs with entries (reservations)
-- after the instant being decided, and the removal of an entry (a part of
-- take.lua, cancel.lua, retime.lua and shorten.lua, see scriptParts in
-- scripts.go).
--
-- A log is a sorted set: member "instant:cost:id", score the running
-- total of the costs up to and including the entry, in order of instant
-- (take.lua). While no entry lies after the instant decided, take.lua
-- finds the earliest instant from two reads of the set. When entries lie
-- after it, a demand may still go before them where it leaves every
-- window room: an entry at x lies in the windows (y-Per, y] for y in
-- [x, x+Per), and the fullest of them ends at x or at an entry. So x is
-- admitted when
--
--   (1) the window ending at x holds at most the allowance (Rate -
--       headroom - cost): total(<= x-Per) >= total(<= x) - allowance, and
--   (2) no entry e in (x, x+Per) ends a window holding more: for each
--       such e, total(<= e-Per) >= total(<= e) - allowance.
--
-- total(<= y) is the running total of the last entry at or before y. The
-- entries after the instant, f of them, are read once from the tail;
-- between two of them total(<= x) is constant, and (1) holds from the
-- instant at which the running total up to x-Per reaches its need, which
-- one ZRANGE BYSCORE finds (as take.lua does with no entry after). So the
-- earliest x costs O(f log n) for a log of n entries, whatever n is. It
-- is quotamath's slidingLogEarliest, which the differential tests check
-- it against. The new entry then goes in order, and the f entries after it
-- move up by its cost.

-- Expiry (quota.LogExpiry): a log limit's phase argument is 0, or
-- "every:phase:spread:reach" (µs), the grid whose windows score the
-- demand's entry. logExpiry parses it (nil for 0), and logEnd returns
-- when the entry of a demand decided at t stops counting, quotamath's
-- LogEnd: t + per, or the latest end of a window of the grid (ends in
-- [phase, phase + spread] modulo every) that may hold a = t + reach;
-- the entry is at logEnd - per. Lua's % is a floored modulo, as
-- quotamath's FloorMod.
local function logExpiry(arg)
  local every, phase, spread, reach = string.match(arg, '^(%d+):(%d+):(%d+):(%d+)$')
  if not every then return nil end
  return {every = tonumber(every), phase = tonumber(phase), spread = tonumber(spread), reach = tonumber(reach)}
end

local function logEnd(ex, t, per)
  if not ex then return t + per end
  local a = t + ex.reach
  local d = (a - ex.phase - ex.spread) % ex.every
  if d + ex.spread >= ex.every then d = 0 end
  return a + ex.every - d
end

-- logReach returns the earliest instant y at which the running total of
-- key up to y reaches need: the instant of the first entry whose score
-- reaches it, or false when the total before the log's first entry
-- already does (entries pruned counted it) or need is not positive.
local function logReach(key, need)
  if need <= 0 then return false end
  local first = redis.call('ZRANGE', key, fmt('%d', need), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  local at, cost = string.match(first[1], '^(%d+):(%d+):')
  if tonumber(first[2]) - tonumber(cost) >= need then return false end
  return tonumber(at)
end

-- logLoad reads the entries of key after instant, in order (from the
-- tail, in batches that double), with their members and running totals,
-- and before, the running total up to instant. The entries after instant
-- are found from the last back, then put in order in one pass (inserting
-- each at the front would cost O(f^2) for f of them: 20 ms for 1000).
local function logLoad(key, instant)
  local size = 4
  while true do
    local tail = redis.call('ZRANGE', key, -size, -1, 'WITHSCORES')
    local lg = {at = {}, cost = {}, member = {}, score = {}}
    local first = #tail + 1 -- the index in tail of the first entry after instant
    local x = #tail - 1
    while x >= 1 do
      local at = tonumber(string.match(tail[x], '^(%d+):'))
      if at <= instant then
        lg.before = tonumber(tail[x + 1])
        break
      end
      first = x
      x = x - 2
    end
    for y = first, #tail - 1, 2 do
      local at, cost = string.match(tail[y], '^(%d+):(%d+):')
      local j = #lg.at + 1
      lg.at[j], lg.cost[j], lg.member[j], lg.score[j] = tonumber(at), tonumber(cost), tail[y], tonumber(tail[y + 1])
    end
    if lg.before then return lg end
    if #tail < 2 * size then -- the whole log is after instant
      lg.before = 0
      if #lg.at > 0 then lg.before = lg.score[1] - lg.cost[1] end
      return lg
    end
    size = 2 * size
  end
end

-- logEarliest returns the earliest instant, not before t, at which the
-- log of key admits a demand leaving room (the allowance) in every window
-- of length per that holds it, or with an expiry ex, in every window
-- that ends from the instant to its entry's end (logEnd: condition (2)
-- reads "in (x, logEnd(x))"); lg is what logLoad read for an instant at
-- or before t.
local function logEarliest(key, lg, t, room, per, ex)
  local at, score = lg.at, lg.score
  local n = #at
  -- ends(j): the running total at the last entry of at[j]'s instant.
  local function ends(j)
    while j < n and at[j + 1] == at[j] do j = j + 1 end
    return score[j]
  end
  lg.blocked = lg.blocked or {}
  local x, k = t, 0 -- k: the entries read that are at or before x
  while true do
    while k < n and at[k + 1] <= x do k = k + 1 end
    local total = lg.before
    if k > 0 then total = score[k] end
    -- (1): from the instant the total up to x-Per reaches total - room.
    local reach = logReach(key, total - room)
    local fits = true
    if reach and reach + per > x then
      fits, x = false, reach + per
      if k < n and x > at[k + 1] then x = at[k + 1] end -- the total rises there: ask again
    end
    if fits then
      -- (2): the entries in (x, x+Per) whose window is too full.
      local upto = logEnd(ex, x, per)
      for j = k + 1, n do
        if at[j] >= upto then break end
        local b = lg.blocked[j]
        if b == nil then
          local r = logReach(key, ends(j) - room)
          b = r ~= false and r > at[j] - per
          lg.blocked[j] = b
        end
        if b then
          fits, x = false, at[j] -- no instant up to it fits
          break
        end
      end
      if fits then return x end
    end
  end
end

-- logInsert adds the entry member of cost at instant to the log of key,
-- lg as logLoad read it for an instant at or before this one: its score
-- is the total up to the entries at or before instant plus cost, and
-- every later entry moves up by cost. Returns the new total of the log.
local function logInsert(key, lg, instant, cost, member)
  local before, k = lg.before, 0
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

-- logRemove removes member, an entry of cost, from the log of key, if it
-- is there, and lowers the running total of every later entry by its
-- cost, so that the cost after any entry is still total minus its score.
-- The later entries are those granted after it (or a Sync filler after
-- it): usually reservations still waiting. Returns whether it was there.
local function logRemove(key, member, cost)
  local score = redis.call('ZSCORE', key, member)
  if not score then return false end
  redis.call('ZREM', key, member)
  local later = redis.call('ZRANGE', key, fmt('(%d', tonumber(score)), '+inf', 'BYSCORE', 'WITHSCORES')
  -- One ZADD per 500 entries (unpack's limit is a few thousand).
  for from = 1, #later, 1000 do
    local zargs = {}
    for x = from, math.min(from + 998, #later - 1), 2 do
      zargs[#zargs + 1] = fmt('%d', tonumber(later[x + 1]) - cost)
      zargs[#zargs + 1] = later[x]
    end
    redis.call('ZADD', key, unpack(zargs))
  end
  return true
end
