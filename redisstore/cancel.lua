-- cancel.lua: give back what a granted take.lua charged.
--
-- Units and key layout as in take.lua; sliding logs with slidinglog.lua
-- (a part of this script, scriptParts in scripts.go). KEYS: one key per limit of the
-- demand, in order.
--
-- ARGV[1], ARGV[2]  the clock and the decision id (prologue.lua); a call
--                   sent again is refused there, and nothing is given back
--                   (a window's refund must not be given twice)
-- then 5 per limit, from ARGV[5*i - 2]: algorithm, param, mark, cost,
-- phase
--   GCRA              param = cost*T as "q:r:Rate" (q µs and r/Rate,
--                     take_gcra.lua); mark = "us:ns", the arrival time
--                     the take set in nanoseconds, rounded up, split at
--                     the microsecond (internal/quotamath's Mark). It is
--                     given back only if the arrival time still has that
--                     mark: no later take moved it since (each moves it by
--                     at least a nanosecond).
--   FIXED_WINDOW,     param = Per; mark = the window index charged; for
--   SLIDING_WINDOW    an Anchored limit (phase -1), the window's start,
--                     given back only while the counter's windows still
--                     start there (take.lua, anchor.lua)
--   SLIDING_LOG       mark = the instant; the member is "instant:cost:id",
--                     its score the running total (take.lua). The whole
--                     cost is given back.
--   CONCURRENCY       param = the channel announcing releases; the member
--                     is the id. A removed lease is announced (see
--                     release.lua).

for i = 1, #KEYS do
  local arg = 5 * i - 2
  local algo, key = ARGV[arg], KEYS[i]
  local mark, cost = ARGV[arg + 2], ARGV[arg + 3]
  if algo == GCRA then
    local raw = redis.call('GET', key)
    local tat, frac = tonumber(raw), 0
    if raw and not tat then
      local us, f = string.match(raw, '^(%d+):(%d+)$')
      tat, frac = tonumber(us), tonumber(f)
    end
    if tat then
      local q, r, rate = string.match(ARGV[arg + 1], '^(%d+):(%d+):(%d+)$')
      local markUs, markNs = string.match(mark, '^(%d+):(%d+)$')
      -- The stored arrival time's mark: ceil(1000*frac/Rate) ns past tat.
      local us, ns = tat, math.ceil(frac * 1000 / rate)
      if ns == 1000 then us, ns = us + 1, 0 end
      if us == tonumber(markUs) and ns == tonumber(markNs) then
        tat, frac = tat - q, frac - r
        if frac < 0 then tat, frac = tat - 1, frac + rate end
        if tat > now or tat == now and frac > 0 then
          local value = fmt('%d', tat)
          if frac > 0 then value = fmt('%d:%d', tat, frac) end
          -- The expiry rule of GCRA keys (take_gcra.lua).
          if slack > 0 then
            redis.call('SET', key, value, 'PX', math.ceil((tat - now) / 1000) + slack)
          else
            redis.call('SET', key, value, 'PXAT', fmt('%d', (floor(tat / GRID) + 2) * 1000))
          end
        else
          redis.call('DEL', key) -- the same as a fresh bucket
        end
      end
    end
  elseif algo == SLIDING_LOG then
    -- Remove the entry, lowering the running totals after it
    -- (slidinglog.lua).
    logRemove(key, mark .. ':' .. cost .. ':' .. callID, tonumber(cost))
  elseif algo == CONCURRENCY then
    if redis.call('ZREM', key, callID) == 1 then
      redis.call('PUBLISH', ARGV[arg + 1], '1')
    end
  else
    if tonumber(ARGV[arg + 4]) < 0 then
      local per, start = tonumber(ARGV[arg + 1]), tonumber(mark)
      local st = redis.call('HMGET', key, 'a', 'e')
      local phase, expiry = tonumber(st[1]), tonumber(st[2])
      if phase and expiry and expiry > now and (start - phase) % per == 0 then
        mark = fmt('%d', (start - phase) / per)
      else
        mark = nil -- the windows moved, or the state ended
      end
    end
    -- Only an existing window: HINCRBY on an expired key would create one
    -- without a TTL.
    if mark and redis.call('HEXISTS', key, mark) == 1 then
      if redis.call('HINCRBY', key, mark, -tonumber(cost)) <= 0 then
        redis.call('HDEL', key, mark)
      end
    end
  end
end
return 1
