-- share.lua: lent headrooms (quota.Bucket.Headroom, Classed) and fair
-- shares of limits among tenants (quota.Bucket.Tenant), for take.lua. It
-- is no script of its own: scripts.go puts it between prologue.lua and
-- take.lua, whose body calls the functions below. The semantics are
-- quota.Store's (Lent headroom, Fair shares); the arithmetic is that of
-- internal/quotamath/share.go, in the same integers.
--
-- Units as in prologue.lua.
--
-- An entry is a limit shared among tenants or whose class is noted
-- (quota.Bucket.Noted). It has four keys (keys.go), after take.lua's
-- limit and replay keys:
--   shares   zset, the counter's fair-share state, in one key so that a
--            decision reads it with one ZMSCORE and writes it with one
--            ZADD (take_share.lua decides a demand of GCRA limits with it
--            in three commands more than take_gcra.lua):
--              'a'..tenant  score: the instant of its last demand; those
--                           after now - Per are the active ones
--              'v'..tenant  score: -(its share clock); the clock counts
--                           as 0 when it is not after now
--              '#c'         score: -(the latest instant at which a claim
--                           lapses); no claim is live once it has passed,
--                           and the claims below are not read
--            Scores of the active marks are instants (>= 0), the others
--            negative: ZCOUNT over (max(now - Per, -1), +inf) counts the
--            active tenants, and ZREMRANGEBYSCORE over [-now, now - Per]
--            drops at once the tenants no longer active, the clocks no
--            longer after now and a lapsed '#c'. It runs when a tenant
--            becomes active, so the key holds at most two members per
--            tenant active since. The key expires at the end of the second
--            after the one holding the latest of the last demand + Per,
--            the clocks and the claims' lapse (the GCRA keys' rule,
--            take_gcra.lua), never earlier (share_expire.lua).
--   claims   zset: tenant -> the place of its claim
--   ends     zset: tenant -> the instant of its claim; it lapses
--            max(T, CLAIM_GRACE) after it
--   notes    hash: headroom -> instant of its latest note
--            (class_note.lua)
-- and eight arguments, after take.lua's limit arguments:
--   the limit's index in the demand (1-based), the tenant ("": none),
--   unit     cost*T (T = Per/Rate; this and the other spans are taken
--            exactly and rounded up to the µs, quotamath's ShareUnit): a
--            grant moves the clock unit*n
--   ahead    C*T (C: Burst for GCRA, Rate otherwise): how far ahead of
--            now a grant leaves the clock at most, before its step
--   window   Per: how long a demand keeps its tenant active
--   claim    T: how long a note keeps its class active, and a claim
--            its holder's place after its instant (at least CLAIM_GRACE)
--   wait     the demand's MaxWait: a refusal within it leaves a claim
--   note     the demand's headroom, noted on the counter; -1: not noted

-- sharesBegin notes the classes and makes the tenant of each of the count
-- entries active, and reads their state. It returns the entries and, by
-- limit index, the headroom lent to the demand: a note of a smaller
-- headroom in the last T holds it (the entry's lend: when the latest such
-- note stops holding it), else it is lent. An entry's held is, when other
-- tenants' live claims at a lower place than the demand's hold it back,
-- until when (share_held.lua).
local function sharesBegin(count, firstArg, firstKey)
  local shared, lentBy = {}, {}
  for s = 1, count do
    local arg, key = firstArg + 8 * (s - 1), firstKey + 4 * (s - 1)
    local share = {
      limit = tonumber(ARGV[arg]), tenant = ARGV[arg + 1], unit = tonumber(ARGV[arg + 2]),
      ahead = tonumber(ARGV[arg + 3]), claim = tonumber(ARGV[arg + 5]), wait = tonumber(ARGV[arg + 6]),
      key = KEYS[key], claims = KEYS[key + 1], ends = KEYS[key + 2],
    }
    local note = tonumber(ARGV[arg + 7])
    if note >= 0 then
      local noteKey, claim, lent, lend = KEYS[key + 3], share.claim, 0, nil
      do
        -- #include class_note.lua
      end
      share.lend = lend
      if lent > 0 then lentBy[share.limit] = lent end
    end
    if share.tenant ~= '' then
      local window = tonumber(ARGV[arg + 4])
      share.vclock = 'v' .. share.tenant
      local active = 'a' .. share.tenant
      local got = redis.call('ZMSCORE', share.key, active, share.vclock, '#c')
      local seen = tonumber(got[1])
      share.n = redis.call('ZCOUNT', share.key, fmt('(%d', math.max(now - window, -1)), '+inf')
      if not seen or seen <= now - window then
        -- Newly active: drop what no longer matters (see above).
        share.n = share.n + 1
        redis.call('ZREMRANGEBYSCORE', share.key, fmt('%d', -now), fmt('%d', now - window))
      end
      share.clock = -(tonumber(got[2]) or 0)
      share.lapse = -(tonumber(got[3]) or 0)
      share.place = share.clock
      if share.place < now then share.place = now end
      if share.lapse > now then
        local claims, ends, tenant, place, claim, held = share.claims, share.ends, share.tenant, share.place, share.claim, nil
        -- #include share_held.lua
        share.place, share.held = place, held
      end
      share.bound = seen and seen + window
      if got[2] and (not share.bound or share.clock > share.bound) then share.bound = share.clock end
      redis.call('ZADD', share.key, fmt('%d', now), active)
      do
        local key, need, bound = share.key, now + window, share.bound
        -- #include share_expire.lua
      end
      if not share.bound or share.bound < now + window then share.bound = now + window end
    end
    shared[s] = share
  end
  return shared, lentBy
end

-- sharesRefusal returns take.lua's reply refusing the demand, whose
-- limits admit it at instant (binding and pause as take.lua found them),
-- or nil if it is granted: refused while other tenants' claims hold it
-- back, until their held (or instant, if later); else when it may not
-- wait until instant, until then, or until a held headroom may be lent if
-- sooner (not before pauseEnd; the limit holding it binds). A refusal
-- within MaxWait leaves claims for the instant it is refused until.
-- common is take.lua's: the earliest instant, not before its argument,
-- at which the limits admit the demand.
local function sharesRefusal(shared, instant, pauseEnd, maxWait, binding, pause, common)
  local held, heldLimit, lend, lender
  for _, share in ipairs(shared) do
    if share.held and (not held or share.held > held) then held, heldLimit = share.held, share.limit end
    if share.lend and (not lend or share.lend < lend) then lend, lender = share.lend, share.limit end
  end
  if not held and instant - now <= maxWait then return nil end
  local refused = instant
  if lend then
    if lend < pauseEnd then lend = pauseEnd end
    if lend < refused then refused, binding, pause = lend, lender - 1, -1 end
  end
  if held and held >= refused then
    -- and if the limits do not admit it then, until they do after it (a
    -- sliding log may admit it now and not then).
    refused, binding, pause = common(held), heldLimit - 1, -1
    if not refused then return redis.error_reply('ERR throttle: no common instant for the limits after 1000 rounds') end
  end
  if refused - now <= shared[1].wait then
    for _, share in ipairs(shared) do
      if share.tenant ~= '' then
        local claims, ends, place, tenant, span = share.claims, share.ends, share.place, share.tenant, share.claim
        -- #include share_claim.lua
        local lapse = refused + span
        if lapse > share.lapse then
          redis.call('ZADD', share.key, fmt('%d', -lapse), '#c')
          do
            local key, need, bound = share.key, lapse, share.bound
            -- #include share_expire.lua
          end
        end
      end
    end
  end
  return {0, refused - now, binding, pause}
end

-- sharesCharged moves the clocks of a demand granted for instant:
-- min(max(clock, instant), instant + C*T) + min(unit*n, 2^50); and drops
-- its claims.
local function sharesCharged(shared, instant)
  for _, share in ipairs(shared) do
    if share.tenant ~= '' then
      local clock, ahead, unit, n = share.clock, share.ahead, share.unit, share.n
      -- #include share_step.lua
      redis.call('ZADD', share.key, fmt('%d', -clock), share.vclock)
      do
        local key, need, bound = share.key, clock, share.bound
        -- #include share_expire.lua
      end
      if share.lapse > now then
        redis.call('ZREM', share.claims, share.tenant)
        redis.call('ZREM', share.ends, share.tenant)
      end
    end
  end
end
