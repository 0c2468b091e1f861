-- share.lua: fair shares of limits among tenants (quota.Bucket.Tenant),
-- for take.lua. It is no script of its own: scripts.go puts it between
-- prologue.lua and take.lua, whose body calls the functions below. The
-- semantics are quota.Store's (Fair shares); the arithmetic is that of
-- internal/quotamath/share.go, in the same integers.
--
-- Units as in prologue.lua.
--
-- A shared limit has three keys (keys.go), after take.lua's limit and
-- replay keys:
--   tenants  zset: tenant -> instant of its last demand; those after
--            now - Per are the active ones
--   claims   zset: tenant -> end of its claim
--   clock    string: the demand's tenant's share clock; it expires when
--            the clock is no longer after now (it then counts as 0)
-- and seven arguments, after take.lua's limit arguments:
--   the limit's index in the demand (1-based), the tenant,
--   unit     cost*T (T = ceil(Per/Rate)): a grant moves the clock unit*n
--   ahead    C*T (C: Burst for GCRA, Rate otherwise): within its share
--            while the clock is less than this ahead of now
--   window   Per: how long a demand keeps its tenant active
--   claim    T: how long a claim outlives its instant
--   wait     the demand's MaxWait: a refusal within it leaves a claim

local MAX_SHARE_STEP = 1125899906842624 -- 2^50 (quotamath.MaxShareStep)

-- sharesBegin makes the tenant of each of the count shared limits active
-- and reads its state. It returns the limits' states and whether the
-- demand is over its share on any of them. A demand over its share on a
-- limit whose claims are live gets held: the instant until which they
-- hold it back (the last claim's end, or when the tenant is within its
-- share again, if sooner).
local function sharesBegin(count, firstArg, firstKey)
  local shared, over = {}, false
  for s = 1, count do
    local arg, key = firstArg + 7 * (s - 1), firstKey + 3 * (s - 1)
    local share = {
      limit = tonumber(ARGV[arg]), tenant = ARGV[arg + 1], unit = tonumber(ARGV[arg + 2]),
      ahead = tonumber(ARGV[arg + 3]), claim = tonumber(ARGV[arg + 5]), wait = tonumber(ARGV[arg + 6]),
      tenants = KEYS[key], claims = KEYS[key + 1], clockKey = KEYS[key + 2],
    }
    local window = tonumber(ARGV[arg + 4])
    redis.call('ZREMRANGEBYSCORE', share.tenants, '-inf', fmt('%d', now - window))
    redis.call('ZADD', share.tenants, fmt('%d', now), share.tenant)
    redis.call('PEXPIRE', share.tenants, math.ceil(window / 1000) + slack)
    share.n = redis.call('ZCARD', share.tenants)
    share.clock = tonumber(redis.call('GET', share.clockKey)) or 0
    if share.clock >= now + share.ahead then
      share.over, over = true, true
      local last = redis.call('ZRANGE', share.claims, -1, -1, 'WITHSCORES')
      if last[2] and tonumber(last[2]) > now then
        local held = tonumber(last[2])
        local back = share.clock - share.ahead + 1
        if back < held then held = back end
        share.held = held
      end
    end
    shared[s] = share
  end
  return shared, over
end

-- sharesHeld returns the latest instant until which claims hold the
-- demand back, and the limit (1-based, the first on ties), or nil.
local function sharesHeld(shared)
  local held, limit = nil, nil
  for _, share in ipairs(shared) do
    if share.held and (not held or share.held > held) then held, limit = share.held, share.limit end
  end
  return held, limit
end

-- sharesClaim gives the demand's tenants within their share a claim
-- until the instant it was refused until, plus T: it was refused only
-- because it may not reserve, and will come back then.
local function sharesClaim(shared, instant)
  for _, share in ipairs(shared) do
    if not share.over then
      local ends = instant + share.claim
      redis.call('ZREMRANGEBYSCORE', share.claims, '-inf', fmt('%d', now))
      redis.call('ZADD', share.claims, fmt('%d', ends), share.tenant)
      local ttl = math.ceil((ends - now) / 1000) + slack
      if redis.call('PEXPIRE', share.claims, ttl, 'NX') == 0 then
        redis.call('PEXPIRE', share.claims, ttl, 'GT')
      end
    end
  end
end

-- sharesCharged moves the clocks of a demand granted for instant:
-- min(max(clock, instant), instant + C*T) + min(unit*n, 2^50); and drops
-- its claims.
local function sharesCharged(shared, instant)
  for _, share in ipairs(shared) do
    local clock = share.clock
    if clock < instant then clock = instant end
    if clock > instant + share.ahead then clock = instant + share.ahead end
    local step = share.unit * share.n
    if step > MAX_SHARE_STEP then step = MAX_SHARE_STEP end
    clock = clock + step
    redis.call('SET', share.clockKey, fmt('%d', clock), 'PX', math.ceil((clock - now) / 1000) + slack)
    redis.call('ZREM', share.claims, share.tenant)
  end
end
