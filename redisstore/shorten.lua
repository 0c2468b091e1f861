-- shorten.lua: end early what granted takes charged to sliding logs
-- (quota.Shortener): each entry named moves to an earlier instant, so
-- that it counts in no window ending at or after now + its within. The
-- entries of one call are of one scope, moved in the order given at the
-- same instant, each as if it were a call of its own.
--
-- Units and key layout as in take.lua; the log with slidinglog.lua (a part
-- of this script, scriptParts in scripts.go). KEYS per entry n, in order:
-- KEYS[2n-1] the log, KEYS[2n] the reservation's settlement key
-- (settle.lua). A key may appear for several entries. All share one hash
-- tag {scope}; no other key is touched.
--
-- ARGV[1], ARGV[2]  the clock and the call id (prologue.lua): "" (the
--          call needs none; marked, so that a call sent again is refused)
-- ARGV[3]  N, the number of entries
-- then per entry, 7 arguments:
--   within  µs, rounded up: the entry counts in no window ending at or
--           after E = now + within
--   Per     µs
--   mark    the entry's instant x
--   cost    the cost the take charged the limit
--   place   the limit's place among the settled limits, 1-based, and
--   settled their number (the demand's limits but its concurrency ones):
--           the settlement key holds one cost per settled limit, and a
--           settled entry's member has that cost (settle.lua)
--   id      the reservation's id, which names its log member
--           "instant:cost:id"
--
-- An entry moves from x to E - Per when that is earlier than x, else
-- nothing changes; nothing changes either when its member is not in the
-- log (cancelled, pruned, or moved already: by an earlier entry of the
-- same call naming it too, or by a run again after a lost reply, which
-- the prologue refuses when marked). The move is logRemove then
-- logInsert: the running totals of the entries between E - Per and x
-- rise by the cost, those after x stay, and every other entry keeps its
-- instant. The key's TTL was set for a later entry, or for x + Per, so it
-- needs no change.
--
-- A move costs about one step per entry of its log (Redis rewrites the
-- running totals of the entries after it): 4 ms for a log of 1000 entries.
-- So that one call never holds Redis long whatever its logs hold, the
-- script stops before an entry whose log would bring the entries of the
-- logs it moved in past BUDGET, after one entry at least: the reply then
-- has pairs for the first entries only, and Shorten sends the others in
-- the next call.
--
-- Reply: a flat array of one pair per entry moved or not, in order: 1,
-- E - Per for an entry moved; 0, x for one not; for all N entries, or
-- for the first ones when the budget ran out.

local BUDGET = 4096
local n = tonumber(ARGV[3])
local reply = {}
local work = 0
local sizes = {} -- by log key: its entries, read once (a move keeps them)

-- shorten moves entry e (1-based) and returns its pair, or nil when the
-- budget leaves no room for its log.
local function shorten(e)
  local a = 3 + 7 * (e - 1)
  local within, per = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local mark, cost = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local place, settled = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  local id = ARGV[a + 7]
  local to = now + within - per
  if to >= mark then return 0, mark end

  -- The cost the entry holds: the settled one, while the settlement lasts.
  local costs = redis.call('GET', KEYS[2 * e])
  if costs then
    local words = {}
    for word in string.gmatch(costs, '%S+') do words[#words + 1] = word end
    if #words == settled and tonumber(words[place]) then cost = tonumber(words[place]) end
  end

  local key = KEYS[2 * e - 1]
  local size = sizes[key]
  if not size then
    size = redis.call('ZCARD', key)
    sizes[key] = size
  end
  if work > 0 and work + size > BUDGET then return nil end
  work = work + size
  if not logRemove(key, fmt('%d:%d:%s', mark, cost, id), cost) then
    return 0, mark
  end
  local lg = logLoad(key, to)
  logInsert(key, lg, to, cost, fmt('%d:%d:%s', to, cost, id))
  return 1, to
end

for e = 1, n do
  local moved, at = shorten(e)
  if moved == nil then break end
  reply[2 * e - 1], reply[2 * e] = moved, at
end
return reply
