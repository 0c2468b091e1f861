-- settle.lua: replace what a granted take charged with the costs the
-- vendor reported (quota.Settler), all limits in one step.
--
-- Units as in prologue.lua.
--
-- KEYS: one key per limit settled (the demand's limits but its
-- concurrency ones, in order), then the reservation's settlement key
-- (keys.go). All share one hash tag {scope}; no other key is touched.
--
-- ARGV[1], ARGV[2]  the clock and the reservation id (prologue.lua); the
--          id names a sliding-log entry's member (take.lua)
-- then 7 per limit, limit i's from ARGV[7*i - 4]: algorithm, param, mark,
-- until, charged, cost, phase
--   param    GCRA: Rate; the others: Per
--   mark     the take's mark: the GCRA arrival time it set, the window
--            it charged, or the log entry's instant
--   until    the instant until which the charge can be settled
--            (quotamath.SettleEnd): while the window counts, Per after
--            the log entry or after the GCRA arrival time
--   charged  what the take charged the limit
--   cost     what it is charged instead; 0 leaves it as it is
--   phase    windows: -1 for an Anchored limit, whose mark is its window's
--            start (take.lua); else unused
-- For GCRA, charged and cost come with their spans c*T (T = Per/Rate,
-- exactly: q µs and r/Rate of one, take_gcra.lua) as "c:q:r", which Go
-- computes in 128 bits: Lua cannot take delta*T exactly, but the
-- difference of two spans it can.
--
-- The settlement key holds the costs the reservation was last settled
-- to, one per limit, separated by spaces ("c:q:r" for GCRA): a limit's
-- charge is that, or `charged` when there is none. Each limit moves by the difference, so a
-- second run with the same costs (a go-redis retry after a lost reply, a
-- second Settle) changes nothing, and one with other costs moves from
-- the first. The key lives until the latest `until`; by then every
-- charge is past settling, so a run after it changes nothing either.
--
-- Reply: 1.

local limits = #KEYS - 1
local settlement = KEYS[#KEYS]
local before = {}
local prev = redis.call('GET', settlement)
if prev then
  for word in string.gmatch(prev, '%S+') do before[#before + 1] = tonumber(word) or word end
  if #before ~= limits then before = {} end
end

-- extend sets key's TTL to at least ttl ms, never shortening it.
local function extend(key, ttl)
  if redis.call('PEXPIRE', key, ttl, 'NX') == 0 then
    redis.call('PEXPIRE', key, ttl, 'GT')
  end
end

local costs, last = {}, now
for i = 1, limits do
  local arg = 7 * i - 4
  local algo, param, mark = ARGV[arg], tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2])
  local ends, key = tonumber(ARGV[arg + 3]), KEYS[i]
  if ends > now and ends > last then last = ends end
  if algo == GCRA then
    -- max(TAT, now) + (cost - old)*T (quotamath.GCRASettle), the
    -- difference of the two spans: an empty bucket is charged from now,
    -- and one whose arrival time falls to now or before is full again.
    local old, cost = before[i] or ARGV[arg + 4], ARGV[arg + 5]
    if string.match(cost, '^0:') then cost = old end
    costs[i] = cost
    local oldCost, oldUs, oldFrac = string.match(old, '^(%d+):(%d+):(%d+)$')
    local newCost, newUs, newFrac = string.match(cost, '^(%d+):(%d+):(%d+)$')
    if ends > now and oldCost ~= newCost then
      local rate = param
      local deltaUs, deltaFrac = newUs - oldUs, newFrac - oldFrac
      if deltaFrac < 0 then deltaUs, deltaFrac = deltaUs - 1, deltaFrac + rate end
      local raw = redis.call('GET', key)
      local tat, frac = tonumber(raw), 0
      if raw and not tat then
        local us, f = string.match(raw, '^(%d+):(%d+)$')
        tat, frac = tonumber(us), tonumber(f)
      end
      tat = tat or 0
      if tat < now then tat, frac = now, 0 end
      tat, frac = tat + deltaUs, frac + deltaFrac
      if frac >= rate then tat, frac = tat + 1, frac - rate end
      if tat < now or tat == now and frac == 0 then
        redis.call('DEL', key)
      else
        local value = fmt('%d', tat)
        if frac > 0 then value = fmt('%d:%d', tat, frac) end
        -- The expiry rule of GCRA keys (take_gcra.lua).
        if slack > 0 then
          redis.call('SET', key, value, 'PX', math.ceil((tat - now) / 1000) + slack)
        else
          redis.call('SET', key, value, 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
        end
      end
    end
  else
    local old, cost = before[i] or tonumber(ARGV[arg + 4]), tonumber(ARGV[arg + 5])
    if cost == 0 then cost = old end
    costs[i] = fmt('%d', cost)
    local delta = cost - old
    if ends > now and delta ~= 0 then
      if algo == SLIDING_LOG then
        -- The entry "instant:cost:id" takes the new cost, and its running
        -- total and every later one (take.lua) move by the difference. A
        -- cost is at least 1, so totals stay strictly increasing and the
        -- order by score stays the order by instant.
        local member = fmt('%d:%d:%s', mark, old, callID)
        local score = redis.call('ZSCORE', key, member)
        if score then
          score = tonumber(score)
          local later = redis.call('ZRANGE', key, fmt('(%d', score), '+inf', 'BYSCORE', 'WITHSCORES')
          redis.call('ZREM', key, member)
          redis.call('ZADD', key, fmt('%d', score + delta), fmt('%d:%d:%s', mark, cost, callID))
          -- One ZADD per 500 entries (unpack's limit is a few thousand).
          for from = 1, #later, 1000 do
            local zargs = {}
            for x = from, math.min(from + 998, #later - 1), 2 do
              zargs[#zargs + 1] = fmt('%d', tonumber(later[x + 1]) + delta)
              zargs[#zargs + 1] = later[x]
            end
            redis.call('ZADD', key, unpack(zargs))
          end
        end
      elseif tonumber(ARGV[arg + 6]) < 0 then
        -- An anchored window (take.lua): its mark is its start. While the
        -- windows stay, its count moves by delta; after a move (the start
        -- on no boundary), an extra charge counts in every window that may
        -- hold the request, sent between the start and now, and a refund
        -- gives nothing back (memstore's settleAnchored).
        local st = redis.call('HMGET', key, 'a', 'e')
        local phase, expiry = tonumber(st[1]), tonumber(st[2])
        if phase and expiry and expiry > now then
          local per, at = param, mark
          if now > at then at = now end
          local from, to = floor((mark - phase) / per), nil
          if (mark - phase) % per == 0 then
            to = from
          elseif delta > 0 then
            local hi = mark + per - 1
            if at < hi then hi = at end
            to = floor((hi - phase) / per)
          end
          local latest = expiry
          for w = from, to or from - 1 do
            local field = fmt('%d', w)
            local count = (tonumber(redis.call('HGET', key, field)) or 0) + delta
            if count > 0 then
              redis.call('HSET', key, field, fmt('%d', count))
              if delta > 0 and at > now then
                local prevAt = tonumber(redis.call('HGET', key, field .. 'r'))
                if not prevAt or at > prevAt then redis.call('HSET', key, field .. 'r', fmt('%d', at)) end
              end
              local wend = (w + 1) * per + phase
              if algo == SLIDING_WINDOW then wend = wend + per end
              if delta > 0 and wend > latest then latest = wend end
            else
              redis.call('HDEL', key, field)
            end
          end
          if latest > expiry then
            redis.call('HSET', key, 'e', fmt('%d', latest))
            extend(key, math.ceil((latest - now) / 1000) + slack)
          end
        end
      else
        -- The window's count, never below 0; a count of 0 is no field. The
        -- key lives while the window counts, as take.lua sets it.
        local field = fmt('%d', mark)
        local count = (tonumber(redis.call('HGET', key, field)) or 0) + delta
        if count > 0 then
          redis.call('HSET', key, field, fmt('%d', count))
          extend(key, math.ceil((ends - now) / 1000) + slack)
        else
          redis.call('HDEL', key, field)
        end
      end
    end
  end
end

if last > now then
  redis.call('SET', settlement, table.concat(costs, ' '), 'PX', math.ceil((last - now) / 1000) + slack)
else
  redis.call('DEL', settlement)
end
return 1
