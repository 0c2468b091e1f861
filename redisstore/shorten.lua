-- shorten.lua: end early what a granted take.lua charged to one sliding
-- log (quota.Shortener): its entry moves to an earlier instant, so that it
-- counts in no window ending at or after now + within.
--
-- Units and key layout as in take.lua; the log with slidinglog.lua (a part
-- of this script, scriptParts in scripts.go). KEYS[1] the log, KEYS[2] the
-- reservation's settlement key (settle.lua); one hash tag {scope}.
--
-- ARGV[1], ARGV[2]  the clock and the reservation's id (prologue.lua),
--                   which names its log member "instant:cost:id"
-- ARGV[3]  within, µs, rounded up: the entry counts in no window ending at
--          or after E = now + within
-- ARGV[4]  Per, µs
-- ARGV[5]  the mark: the entry's instant x
-- ARGV[6]  the cost the take charged the limit
-- ARGV[7]  the limit's place among the settled limits, 1-based, and
-- ARGV[8]  their number (the demand's limits but its concurrency ones):
--          the settlement key holds one cost per settled limit, and a
--          settled entry's member has that cost (settle.lua)
--
-- The entry moves from x to E - Per when that is earlier than x, else
-- nothing changes; nothing changes either when the member is not in the
-- log (cancelled, pruned, or moved already: a run again after a lost
-- reply finds it gone). The move is logRemove then logInsert: the running
-- totals of the entries between E - Per and x rise by the cost, those
-- after x stay, and every other entry keeps its instant. The key's TTL
-- was set for a later entry, or for x + Per, so it needs no change.
--
-- Reply: {1, E - Per} when moved, {0, x} when not.

local within, per = tonumber(ARGV[3]), tonumber(ARGV[4])
local mark, cost = tonumber(ARGV[5]), tonumber(ARGV[6])
local place, settled = tonumber(ARGV[7]), tonumber(ARGV[8])
local to = now + within - per
if to >= mark then return {0, mark} end

-- The cost the entry holds: the settled one, while the settlement lasts.
local costs = redis.call('GET', KEYS[2])
if costs then
  local words = {}
  for word in string.gmatch(costs, '%S+') do words[#words + 1] = word end
  if #words == settled and tonumber(words[place]) then cost = tonumber(words[place]) end
end

local key = KEYS[1]
if not logRemove(key, fmt('%d:%d:%s', mark, cost, callID), cost) then
  return {0, mark}
end
local lg = logLoad(key, to)
logInsert(key, lg, to, cost, fmt('%d:%d:%s', to, cost, callID))
return {1, to}
