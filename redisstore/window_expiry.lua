-- window_expiry.lua: keeps a window counter's key (take.lua's layout)
-- until the end of window, its newest (one window later for a sliding
-- window, which reads it as the previous one), and notes that end in
-- an anchored counter's 'e' field when it is later than expiry (the
-- field as read). The one copy of that rule for take.lua and
-- retime.lua; a block of code, no function (see share_held.lua):
-- scripts.go puts its text in place of the line
-- "-- #include window_expiry.lua".
--
-- In: key, window, per, phase, algo, anchored, expiry, now, slack.
local ends = (window + 1) * per + phase
if algo == SLIDING_WINDOW then ends = ends + per end
local ttl = math.ceil((ends - now) / 1000) + slack
if redis.call('PEXPIRE', key, ttl, 'NX') == 0 then
  redis.call('PEXPIRE', key, ttl, 'GT')
end
if anchored and ends > expiry then
  redis.call('HSET', key, 'e', fmt('%d', ends))
end
