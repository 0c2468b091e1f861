#!/bin/bash
# callgrind_slidinglog.sh TAKE.lua ENTRIES CALLS [refused]
#
# Counts the user-space instructions redis-server executes per EVALSHA of
# TAKE.lua (take.lua after prologue.lua, as scripts.go composes them;
# LAYOUT=before-prologue for a copy from before the shared prologue, whose
# ARGV[6] counts carried releases since issue 18: OLD=1 as well for an
# older copy, without that argument) deciding
# one sliding-log limit whose log holds ENTRIES entries, as
# BenchmarkSlidingLog does: a limit of Rate ENTRIES per ENTRIES ms, filled
# by ENTRIES takes 1 ms apart on the script's test clock (ARGV[1]); then
# CALLS takes, each 1 ms after the last, each granted at once with the
# window exactly full (one entry leaves, one comes). With "refused", the
# CALLS takes instead come at the instant of the last fill with MaxWait 0
# on the full log: refused, with the 1 ms until the oldest entry leaves.
# Counting starts after the fill; calls go one at a time on one connection
# (redis-cli reading commands from a file). Needs valgrind and redis-tools.
# FILL=before writes the fill directly in the layout of the script before
# issue 18 (members "cost:id" scored by instant), whose fill by takes alone
# would cost O(ENTRIES^2) under valgrind.
#
#   redisstore/testdata/callgrind_slidinglog.sh redisstore/take.lua 10000 2000
set -e
lua=$1 entries=$2 calls=$3 mode=${4:-granted}
port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" redis-server --port $port --save '' --appendonly no >/dev/null 2>"$dir/vg.log" &
vpid=$!
for _ in $(seq 1 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.2; done
if [ -n "${LAYOUT:-}" ]; then
	cp "$lua" "$dir/script.lua"
else
	cat "$(dirname "$lua")/prologue.lua" "$lua" >"$dir/script.lua"
fi
sha=$(redis-cli -p $port script load "$(cat "$dir/script.lua")")
t0=1700000000000000
per=$((entries * 1000))
# take AT MAXWAIT ID: one take.lua call (no pause, no replay key, no
# carried release).
carried=" 0"
if [ -n "${OLD:-}" ]; then carried=""; fi
# The layout of prologue.lua and take.lua: clock, id, MaxWait, pause
# keys, reply TTL, carried releases, then the limit.
take() { echo "EVALSHA $sha 1 {b}:l:log:k $1 $3 $2 0 0 0 2 $per $((entries - 1)) 1"; }
if [ -n "${LAYOUT:-}" ]; then
	take() { echo "EVALSHA $sha 1 {b}:l:log:k $1 $2 0 0 $3$carried 2 $per $((entries - 1)) 1"; }
fi
for i in $(seq 1 "$entries"); do take $((t0 + i * 1000)) 3600000000 f$i; done >"$dir/fill"
last=$((t0 + entries * 1000))
for i in $(seq 1 "$calls"); do
	if [ "$mode" = refused ]; then take $last 0 r$i; else take $((last + i * 1000)) 3600000000 c$i; fi
done >"$dir/calls"
if [ "$FILL" = before ]; then
	redis-cli -p $port eval "for i = 1, tonumber(ARGV[1]) do redis.call('ZADD', KEYS[1], ARGV[2] + i * 1000, '1:f' .. i) end" 1 {b}:l:log:k "$entries" $t0 >/dev/null
else
	redis-cli -p $port <"$dir/fill" >/dev/null
fi
callgrind_control -z $vpid >/dev/null 2>&1
redis-cli -p $port <"$dir/calls" >"$dir/replies"
callgrind_control -d $vpid >/dev/null 2>&1
sleep 0.5
f=$(ls -t "$dir"/cg.* | head -1)
ir=$(grep -m1 "^summary:\|^totals:" "$f" | awk '{print $2}')
n=$(redis-cli -p $port zcard {b}:l:log:k)
redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
wait $vpid 2>/dev/null || true
echo "$(basename "$lua") $mode, $entries entries ($n at the end): $((ir / calls)) instructions/call; last reply: $(tail -5 "$dir/replies" | tr '\n' ' ')"
