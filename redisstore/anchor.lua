-- anchor.lua: move the windows of an Anchored limit to where the
-- vendor's end (quota.Anchorer), counting every unit already charged in
-- each new window it may lie in.
--
-- Units as in prologue.lua; the hash of an Anchored window limit as in
-- take.lua ('a' the phase, 'e' the end of the state, '<k>' the count of
-- window k, '<k>r' the latest instant charged to it after its call's now;
-- 'l' that the phase is the vendor's).
--
-- KEYS[1]  the limit's key (layout in keys.go), in the scope's hash tag
-- ARGV[1], ARGV[2]  the clock and "" (prologue.lua)
-- ARGV[3]  the algorithm: FIXED_WINDOW or SLIDING_WINDOW
-- ARGV[4]  Per
-- ARGV[5]  within: the vendor's window ends at now + within; <= 0: it
--          says nothing
-- ARGV[6]  tolerance (>= 0)
--
-- Reply: {moved, ends}: 1 if the windows moved (or took the vendor's
-- phase for the first time), and the time from now to the end of the
-- window of now after it (0 for a counter with no state left so). For
-- within <= 0, moved is 1 if the phase was learned from the vendor.

local key, sliding = KEYS[1], ARGV[3] == SLIDING_WINDOW
local per, within, tolerance = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])

local st = redis.call('HMGET', key, 'a', 'e', 'l')
local phase, expiry, learned = tonumber(st[1]), tonumber(st[2]), st[3]
if not expiry or expiry <= now then phase, expiry, learned = nil, 0, nil end

-- endsAt(ph) is the end of the window of now, on the phase ph.
local function endsAt(ph)
  return floor((now - ph) / per) * per + ph + per
end

if within <= 0 then
  if not phase then return {0, 0} end
  return {learned and 1 or 0, endsAt(phase) - now}
end
local target = (now + within) % per
-- The tolerance holds only for a phase learned from the vendor ('l'): one
-- set by a first charge or a sync says nothing of the vendor's windows,
-- and may end them just before the vendor's.
if learned then
  local off = (target - phase) % per
  if per - off < off then off = per - off end
  if off <= tolerance then return {0, endsAt(phase) - now} end
end

-- Move. The units of old window k lie in [start, min(end - 1, max(now,
-- last, start))]; each new window that meets that span counts them all
-- (quotamath.Limit.Reanchor). New windows before the one of now (before
-- its previous, for a sliding window) no longer count and are left out.
local old = phase or 0 -- state with no phase is no anchored state: read on the fixed grid
local counts, lasts = {}, {}
if phase then
  local fields = redis.call('HGETALL', key)
  for x = 1, #fields, 2 do
    local k, r = string.match(fields[x], '^(%-?%d+)(r?)$')
    if k then
      if r == 'r' then lasts[tonumber(k)] = tonumber(fields[x + 1]) else counts[tonumber(k)] = tonumber(fields[x + 1]) end
    end
  end
end
local keep = floor((now - target) / per)
if sliding then keep = keep - 1 end
local newCounts, newLasts, order = {}, {}, {}
for k, count in pairs(counts) do
  if count > 0 then
    local lo = k * per + old
    local bound = now
    if lasts[k] and lasts[k] > bound then bound = lasts[k] end
    if lo > bound then bound = lo end
    local hi = lo + per - 1
    if bound < hi then hi = bound end
    local from = floor((lo - target) / per)
    if from < keep then from = keep end
    for w = from, floor((hi - target) / per) do
      local last = w * per + target + per - 1
      if hi < last then last = hi end
      if not newCounts[w] then
        newCounts[w], newLasts[w] = 0, last
        order[#order + 1] = w
      end
      newCounts[w] = newCounts[w] + count
      if last > newLasts[w] then newLasts[w] = last end
    end
  end
end

-- The state lives to the end of the window of now, or of the last window
-- that holds units (one window longer for a sliding window), and at
-- least as long as it did.
local ends = endsAt(target)
for _, w in ipairs(order) do
  if (w + 1) * per + target > ends then ends = (w + 1) * per + target end
end
if sliding then ends = ends + per end
if expiry > ends then ends = expiry end

redis.call('DEL', key)
local hargs = {'a', fmt('%d', target), 'e', fmt('%d', ends), 'l', '1'}
for _, w in ipairs(order) do
  hargs[#hargs + 1] = fmt('%d', w)
  hargs[#hargs + 1] = fmt('%d', newCounts[w])
  if newLasts[w] > now then
    hargs[#hargs + 1] = fmt('%dr', w)
    hargs[#hargs + 1] = fmt('%d', newLasts[w])
  end
end
redis.call('HSET', key, unpack(hargs))
redis.call('PEXPIRE', key, math.ceil((ends - now) / 1000) + slack)
return {1, endsAt(target) - now}
