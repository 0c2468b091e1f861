-- cancel.lua: give back what a granted take.lua charged.
--
-- Units and key layout as in take.lua. KEYS: one key per limit of the
-- demand, in order.
--
-- ARGV[1]  "" to read TIME; tests may pass the current instant instead;
--          "R" when go-redis sends the call again (ReplayDetect, resend.go):
--          refused with an error beginning "RESENT", nothing given back (a
--          window's refund must not be given twice)
-- ARGV[2]  the decision id
-- then 4 per limit: algorithm, a, mark, cost
--   0 GCRA            a = cost*T; mark = the arrival time the take set. It
--                     is given back only if no later take moved it since.
--   1, 3 windows      mark = the window index charged
--   2 sliding log     mark = the instant; the member is "instant:cost:id",
--                     its score the running total (take.lua). The whole
--                     cost is given back.
--   4 concurrency     a = the channel announcing releases; the member is
--                     the id. A removed lease is announced (see release.lua).

if ARGV[1] == 'R' then
  return redis.error_reply('RESENT: call sent again, not decided again')
end

local fmt = string.format
local now, slack
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  slack = 0
else
  now = tonumber(ARGV[1])
  slack = 3600000
end

for i = 1, #KEYS do
  local j = 4 * i - 1
  local alg, key = ARGV[j], KEYS[i]
  if alg == '0' then
    local a, mark = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    if tonumber(redis.call('GET', key)) == mark then
      local tat = mark - a
      if tat > now then
        -- The expiry rule of GCRA keys (take_gcra.lua).
        if slack > 0 then
          redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
        else
          redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (math.floor(tat / 1000000) + 2) * 1000))
        end
      else
        redis.call('DEL', key) -- the same as a fresh bucket
      end
    end
  elseif alg == '2' then
    -- Remove the entry and lower the running total of every later entry
    -- by its cost, so that the cost after any entry is still total minus
    -- its score. The later entries are those granted after this one (or
    -- a Sync filler after it): usually reservations still waiting.
    local cost = tonumber(ARGV[j + 3])
    local member = ARGV[j + 2] .. ':' .. ARGV[j + 3] .. ':' .. ARGV[2]
    local score = redis.call('ZSCORE', key, member)
    if score then
      redis.call('ZREM', key, member)
      local later = redis.call('ZRANGE', key, fmt('(%d', tonumber(score)), '+inf', 'BYSCORE', 'WITHSCORES')
      -- One ZADD per 500 entries (unpack's limit is a few thousand).
      for from = 1, #later, 1000 do
        local args = {}
        for x = from, math.min(from + 998, #later - 1), 2 do
          args[#args + 1] = fmt('%d', tonumber(later[x + 1]) - cost)
          args[#args + 1] = later[x]
        end
        redis.call('ZADD', key, unpack(args))
      end
    end
  elseif alg == '4' then
    if redis.call('ZREM', key, ARGV[2]) == 1 then
      redis.call('PUBLISH', ARGV[j + 1], '1')
    end
  else
    -- Only an existing window: HINCRBY on an expired key would create one
    -- without a TTL.
    local f = ARGV[j + 2]
    if redis.call('HEXISTS', key, f) == 1 then
      if redis.call('HINCRBY', key, f, -tonumber(ARGV[j + 3])) <= 0 then
        redis.call('HDEL', key, f)
      end
    end
  end
end
return 1
