-- take.lua: decide every limit of one demand, and charge all of them or none.
--
-- Units: every instant and duration is an integer number of microseconds
-- of Redis's clock (TIME). Lua numbers are doubles; every value here stays
-- below 2^53 (Go checks Per*max(Rate,Burst) < 2^53), so the arithmetic is
-- exact. Numbers that go back into Redis are formatted with '%d', since
-- Lua's default number format has only 14 significant digits.
--
-- KEYS: the demand's pause keys (ARGV[3] of them), then one key per limit,
-- then, when ARGV[4] > 0, the key that remembers this decision's reply,
-- then the ARGV[6] concurrency keys of leases released earlier (see
-- below). All share one hash tag {scope}; no other key is touched.
--
-- ARGV[1]  "" to read TIME; tests may pass the current instant instead
-- ARGV[2]  MaxWait
-- ARGV[3]  number of pause keys
-- ARGV[4]  how long to remember the reply, ms; 0: not at all; "R" when
--          go-redis sends the call again (ReplayDetect, resend.go): refused
--          with an error beginning "RESENT", nothing decided
-- ARGV[5]  decision id (unique; names sliding-log members)
-- ARGV[6]  number of leases released earlier, carried by this call
-- then 4 per limit: algorithm, a, b, cost
--   0 GCRA            a = cost*T, b = Burst*T - cost*T (T = ceil(Per/Rate))
--   1 fixed window    a = Per,    b = Rate - cost
--   2 sliding log     a = Per,    b = Rate - cost
--   3 sliding window  a = Per,    b = Rate - cost
--   4 concurrency     a = lease time (Per), b = Rate (slots); the member
--                     of a lease is the decision id. A slot is taken only
--                     when the demand acts now; a reservation (delay > 0)
--                     leaves it to claim.lua when it comes due
-- then 2 per carried release: the lease id, the channel announcing it
--
-- Carried releases: a release (Store.Release) waits briefly for a later
-- take or claim of its scope to carry it (releases.go), so an in-flight
-- limit costs one round trip per request, not two. They are applied
-- first, as release.lua does: ZREM by id (idempotent) and PUBLISH.
--
-- Reply: {1, delay, -1, -1, mark...} when granted (a mark per limit: the
-- GCRA arrival time set, the window charged, the log instant, or the
-- lease's expiry, 0 for a slot left unclaimed), or
-- {0, delay, binding limit index, binding pause index} when refused; indexes
-- are 0-based, -1 for none.

if ARGV[4] == 'R' then
  return redis.error_reply('RESENT: call sent again, not decided again')
end

local fmt = string.format
local now, slack
if ARGV[1] == '' then
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  slack = 0
else
  -- A client-given instant need not advance with Redis's clock, so keys
  -- get an hour of extra life (tests only).
  now = tonumber(ARGV[1])
  slack = 3600000
end

-- Carried releases first (as in release.lua); a second run is a no-op.
local nr = tonumber(ARGV[6])
for k = #KEYS - nr + 1, #KEYS do
  local x = #ARGV - 2 * (#KEYS - k) - 1
  if redis.call('ZREM', KEYS[k], ARGV[x]) == 1 then redis.call('PUBLISH', ARGV[x + 1], '1') end
end

local np = tonumber(ARGV[3])
local nl = (#ARGV - 6 - 2 * nr) / 4
local rttl = tonumber(ARGV[4])
if rttl > 0 then
  -- A retry of a call whose reply was lost: answer as the first run did.
  local prev = redis.call('GET', KEYS[np + nl + 1])
  if prev then
    local r = {1, 0, -1, -1}
    for w in string.gmatch(prev, '%S+') do
      r[#r + 1] = tonumber(w)
    end
    local t = table.remove(r, 5)
    if t > now then r[2] = t - now end
    return r
  end
end

-- Pauses: t starts at the latest pause end (lowest index on ties).
local t, pause = now, -1
for i = 1, np do
  local v = tonumber(redis.call('GET', KEYS[i]))
  if v and v > t then t, pause = v, i - 1 end
end

-- Fixpoint: t' = max over limits of the earliest instant, not before t, at
-- which the limit admits the cost; repeat until no limit raises t.
local st = {} -- per limit, state read once: GCRA arrival time, sliding log floor
local logTotal = {} -- sliding log: the running total of its newest entry, 0 if none
local binding, rounds = -1, 0
while true do
  local nxt, raiser = t, -1
  for i = 1, nl do
    local j = 3 + 4 * i
    local alg, a, b = ARGV[j], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    local key = KEYS[np + i]
    local e = t
    if alg == '0' then
      local tat = st[i]
      if not tat then
        tat = tonumber(redis.call('GET', key)) or 0
        st[i] = tat
      end
      if tat - b > e then e = tat - b end
    elseif alg == '4' then
      -- Concurrency: decided below, for now only.
    elseif alg == '1' then
      -- First window, the current one or later, with room for the cost.
      local k = math.floor(t / a)
      while (tonumber(redis.call('HGET', key, fmt('%d', k))) or 0) > b do
        k = k + 1
      end
      if k * a > e then e = k * a end
    elseif alg == '3' then
      -- prev*(P-x) + (cur+cost)*P <= Rate*P, x the offset into window k.
      local k = math.floor(t / a)
      while true do
        local start = k * a
        local v = redis.call('HMGET', key, fmt('%d', k - 1), fmt('%d', k))
        local room = b - (tonumber(v[2]) or 0)
        if room >= 0 then
          local x = t - start
          if x < 0 then x = 0 end
          local prev = tonumber(v[1]) or 0
          if prev > 0 then
            local y = a - math.floor(room * a / prev)
            if y > x then x = y end
          end
          if x < a then
            e = start + x
            break
          end
        end
        k = k + 1
      end
    else
      -- Sliding log: a sorted set of the granted entries, member
      -- "instant:cost:id", score the running total of the costs up to and
      -- including the entry. Grants come at non-decreasing instants (never
      -- before the newest entry, below; sync.lua inserts in order), so the
      -- order by score is the order by instant, and the cost of the
      -- entries after one is total - its score. The cost fits at e when
      -- the entries after e-Per hold at most b, that is when the running
      -- total up to e-Per reaches need = total-b: when the first entry
      -- whose score reaches need is at or before e-Per, or when the total
      -- before that entry already does (it is then the first entry left,
      -- and the total before it counts entries pruned). Two O(log n)
      -- reads, once per call, give floor, the earliest instant that
      -- allows: the same instant as summing the window.
      local floor = st[i]
      if not floor then
        floor, logTotal[i] = 0, 0
        local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
        if newest[1] then
          local total = tonumber(newest[2])
          local need = total - b
          local first = redis.call('ZRANGE', key, fmt('%d', need), '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
          local at, cost = string.match(first[1], '^(%d+):(%d+):')
          floor = tonumber(string.match(newest[1], '^%d+'))
          if tonumber(first[2]) - tonumber(cost) < need then
            local free = tonumber(at) + a
            if free > floor then floor = free end
          end
          logTotal[i] = total
        end
        st[i] = floor
      end
      if floor > e then e = floor end
    end
    if e > nxt then nxt, raiser = e, i - 1 end
  end
  if raiser < 0 then break end
  t, binding = nxt, raiser
  rounds = rounds + 1
  if rounds == 1000 then
    return redis.error_reply('ERR throttle: no common instant for the limits after 1000 rounds')
  end
end

if t - now > tonumber(ARGV[2]) then
  return {0, t - now, binding, pause}
end

-- Concurrency (alg 4): a slot must be free now, whatever t is, since a slot
-- frees when its holder releases it, which no script can foresee (a
-- reservation does not take it, but a demand queued behind busy slots
-- should not hold rate quota it may not be able to use). Leases
-- whose expiry is not after now are pruned, but only when the set looks
-- full: below Rate members there is a free slot anyway, and the set never
-- grows past Rate. A full limit refuses with the delay until max(t, the
-- expiry that frees a slot if nobody releases).
for i = 1, nl do
  local j = 3 + 4 * i
  if ARGV[j] == '4' then
    local key = KEYS[np + i]
    local n, slots = redis.call('ZCARD', key), tonumber(ARGV[j + 2])
    if n >= slots then
      n = n - redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now))
    end
    if n >= slots then
      local e = tonumber(redis.call('ZRANGE', key, n - slots, n - slots, 'WITHSCORES')[2])
      if e < t then e = t end
      return {0, e - now, i - 1, -1}
    end
    st[i] = n
  end
end

-- Charge every limit at t. TTLs (ms, rounded up) end when the state can no
-- longer matter: 1 to 2 s after the arrival time (GCRA's expiry rule, see
-- take_gcra.lua), at the end of the window (one window
-- later for the sliding window, which reads it as the previous one), or
-- Per after the newest log entry.
local r = {1, t - now, -1, -1}
for i = 1, nl do
  local j = 3 + 4 * i
  local alg, a = ARGV[j], tonumber(ARGV[j + 1])
  local key = KEYS[np + i]
  if alg == '0' then
    local old = st[i]
    local tat = old
    if tat < t then tat = t end
    tat = tat + a
    -- The expiry rule of GCRA keys (take_gcra.lua): at the end of the
    -- second after the one that holds the value, rewritten only when the
    -- value moves to another second (INCRBY keeps the TTL).
    if slack > 0 then
      redis.call('SET', key, fmt('%d', tat), 'PX', math.ceil((tat - now) / 1000) + slack)
    elseif old > 0 and math.floor(old / 1000000) == math.floor(tat / 1000000) then
      redis.call('INCRBY', key, fmt('%d', tat - old))
    else
      redis.call('SET', key, fmt('%d', tat), 'PXAT', fmt('%d', (math.floor(tat / 1000000) + 2) * 1000))
    end
    r[4 + i] = tat
  elseif alg == '4' then
    if t > now then
      -- A reservation holds no slot while it waits: its holder claims
      -- one when it comes due (claim.lua). Mark 0: unclaimed.
      r[4 + i] = 0
    else
      -- The lease runs from now to now + Per. The key lives until its
      -- latest lease expires.
      local exp = now + a
      redis.call('ZADD', key, fmt('%d', exp), ARGV[5])
      local ms = math.ceil((exp - now) / 1000) + slack
      if st[i] == 0 then
        redis.call('PEXPIRE', key, ms)
      else
        redis.call('PEXPIRE', key, ms, 'GT')
      end
      r[4 + i] = exp
    end
  elseif alg == '2' then
    -- The entry's score is the running total with its cost (t is not
    -- before the newest entry, so it goes last).
    local total = logTotal[i] + tonumber(ARGV[j + 3])
    redis.call('ZADD', key, fmt('%d', total), fmt('%d:%s:%s', t, ARGV[j + 3], ARGV[5]))
    if logTotal[i] > 0 then
      -- Entries at or before now-Per can matter no more; they are a
      -- prefix. Read from the head in batches that double, so k of them
      -- cost O(log k) reads (each decision adds one: usually one read of
      -- two finds one); the new entry, after now-Per, ends the search.
      local old, size = now - a, 2
      while true do
        local head = redis.call('ZRANGE', key, 0, size - 1)
        local stale = 0
        while head[stale + 1] and tonumber(string.match(head[stale + 1], '^%d+')) <= old do
          stale = stale + 1
        end
        if stale > 0 then redis.call('ZREMRANGEBYRANK', key, 0, stale - 1) end
        if stale < size then break end
        size = 2 * size
      end
      if total >= 4503599627370496 then
        -- The total nears 2^53, past which doubles lose integers: count
        -- again from 0 before the first entry (once in 2^52 units).
        local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
        local base = tonumber(all[2]) - tonumber(string.match(all[1], '^%d+:(%d+):'))
        for x = 1, #all, 2 do
          redis.call('ZADD', key, fmt('%d', tonumber(all[x + 1]) - base), all[x])
        end
      end
    end
    redis.call('PEXPIRE', key, math.ceil((t + a - now) / 1000) + slack)
    r[4 + i] = t
  else
    local k = math.floor(t / a)
    local c = tonumber(ARGV[j + 3])
    if redis.call('HINCRBY', key, fmt('%d', k), c) == c then
      -- A new window (once per window and key): extend the TTL to its
      -- end, and drop windows that have passed.
      local ends = (k + 1) * a
      if alg == '3' then ends = ends + a end
      local ms = math.ceil((ends - now) / 1000) + slack
      if redis.call('PEXPIRE', key, ms, 'NX') == 0 then
        redis.call('PEXPIRE', key, ms, 'GT')
      end
      if redis.call('HLEN', key) > 3 then
        local keep = math.floor(now / a)
        if alg == '3' then keep = keep - 1 end
        local fields = redis.call('HKEYS', key)
        for _, f in ipairs(fields) do
          if tonumber(f) < keep then redis.call('HDEL', key, f) end
        end
      end
    end
    r[4 + i] = k
  end
end

if rttl > 0 then
  local v = fmt('%d', t)
  for i = 1, nl do v = v .. ' ' .. fmt('%d', r[4 + i]) end
  redis.call('SET', KEYS[np + nl + 1], v, 'PX', rttl)
end
return r
