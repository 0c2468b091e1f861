-- prologue.lua: the start of every script of the package. Redis scripts
-- cannot include one another, so scripts.go puts this text before each
-- script's body and Redis runs the two as one script (its SHA is that of
-- the whole).
--
-- Every script takes the same two arguments first:
--
-- ARGV[1]  "" to read Redis's clock (TIME); from tests only, the current
--          instant instead
-- ARGV[2]  the call id: the decision or lease id, or "" for a call that
--          needs none. "R" when go-redis sends a marked call again
--          (ReplayDetect, resend.go): the call is refused with an error
--          beginning "RESENT" and nothing is decided or given back
-- ARGV[3]  and on: the script's own arguments, listed in its header
--
-- Units: every instant and duration is an integer number of microseconds
-- of Redis's clock; a GCRA arrival time may carry a fraction of one in
-- units of 1/Rate µs (take_gcra.lua). Lua numbers are doubles; every value
-- stays below 2^53 (quota.Limit's bounds; Go sends products that would
-- pass it, n*Per/Rate, as quotient and remainder; a sliding window's
-- weights are kept below 2^52, take_window.lua), so the arithmetic is
-- exact.
-- Numbers that go back into Redis are formatted with '%d' (fmt), since
-- Lua's default number format has only 14 significant digits.
--
-- Defined here for the body:
--   now, slack  the current instant; and ms added to every TTL: 0, or an
--               hour under a test clock, which need not advance with
--               Redis's
--   callID      ARGV[2]
--   fmt, floor  string.format, math.floor
--   GCRA .. CONCURRENCY  the algorithm codes of the scripts' arguments,
--               the codes of algoCodes in scripts.go (a test checks both
--               agree)
--   GRID        the expiry grid of GCRA keys, µs (see take_gcra.lua)

local callID = ARGV[2]
if callID == 'R' then
  return redis.error_reply('RESENT: call sent again, not decided again')
end
local now, slack
if ARGV[1] == '' then
  local clock = redis.call('TIME')
  now = clock[1] * 1000000 + clock[2]
  slack = 0
else
  now = tonumber(ARGV[1])
  slack = 3600000
end
local fmt, floor = string.format, math.floor
local GCRA, FIXED_WINDOW, SLIDING_LOG, SLIDING_WINDOW, CONCURRENCY = '0', '1', '2', '3', '4'
local GRID = 1000000
