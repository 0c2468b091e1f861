-- class_note.lua: notes a demand's class on a counter (quota.Bucket.Noted)
-- and finds whether its headroom is lent. It is a block of code, no
-- script and no function (a closure costs Redis about 2k instructions per
-- call, which a plain decision would pay): scripts.go puts its text in
-- place of the line "-- #include class_note.lua" in take_window.lua and
-- share.lua.
--
-- In: noteKey, the counter's notes (a hash: headroom -> the instant of its
-- latest note; notes no longer active are left, one field per headroom
-- ever noted); note, the demand's headroom (>= 0); claim, T rounded up.
-- Out, locals of the includer: lent, the headroom lent to the demand
-- (note, when no note of a smaller headroom is active, after now - T;
-- else 0), and lend, when the latest of those stops holding it (T after
-- it), else nil. The key lives at least until the end of the second
-- after the one holding now + T (PEXPIREAT GT when that moves past the
-- demand's own previous note's; PEXPIRE under a test clock).
local noteList, ownNote = redis.call('HGETALL', noteKey), nil
for x = 1, #noteList, 2 do
  local h, at = tonumber(noteList[x]), tonumber(noteList[x + 1])
  if h == note then
    ownNote = at
  elseif h < note and at > now - claim and (not lend or at + claim > lend) then
    lend = at + claim
  end
end
redis.call('HSET', noteKey, fmt('%d', note), fmt('%d', now))
if slack > 0 then
  local ttl = math.ceil(claim / 1000) + slack
  if redis.call('PEXPIRE', noteKey, ttl, 'GT') == 0 then redis.call('PEXPIRE', noteKey, ttl, 'NX') end
elseif not ownNote or floor((now + claim) / GRID) > floor((ownNote + claim) / GRID) then
  local at = fmt('%d', (floor((now + claim) / GRID) + 2) * 1000)
  if redis.call('PEXPIREAT', noteKey, at, 'GT') == 0 then redis.call('PEXPIREAT', noteKey, at, 'NX') end
end
lent = 0
if note > 0 and not lend then lent = note end
