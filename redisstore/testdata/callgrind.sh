#!/bin/bash
# callgrind.sh SCRIPT.lua N NUMKEYS KEY... ARG...
#
# Counts the user-space instructions redis-server executes per EVALSHA of
# SCRIPT.lua (event loop, parsing and reply included), exactly and
# independently of machine noise: it starts redis-server under valgrind's
# callgrind on a random loopback port, loads the script, warms up with 200
# calls, zeroes the counters, runs N calls from redis-benchmark (one
# connection) and divides the instruction count, less serverCron's (which
# runs by wall-clock time, so more of it on a slower or busier machine),
# by N: the count is then the same to within ~150 instructions run to run. __rand_int__ in a
# key or argument is replaced by redis-benchmark with a random number per
# call (e.g. a fresh replay key). The script run is prologue.lua (from
# SCRIPT.lua's directory, when there is one), the script's parts
# (scriptParts, e.g. take.lua's share.lua; includes expanded), then SCRIPT.lua,
# as scripts.go composes it; a copy from before the shared prologue is run
# alone. Needs valgrind and redis-tools.
#
# The arguments start with the prologue's two (ARGV[1] "" for TIME, ARGV[2]
# the call id or ""):
#
#   redisstore/testdata/callgrind.sh redisstore/take_gcra.lua 10000 1 k "" "" 10000000 1 100000000
set -e
lua=$1; shift; n=$1; shift
port=$((20000 + RANDOM % 20000))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" redis-server --port $port --save '' --appendonly no >/dev/null 2>"$dir/vg.log" &
vpid=$!
for _ in $(seq 1 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.2; done
# The package's files: the script's directory, or for a measurement
# kept in testdata/ (share_floor.lua), the package above it.
src=$(cd "$(dirname "$lua")" && pwd)
case "$src" in */testdata) src=$(dirname "$src") ;; esac
prologue=$src/prologue.lua
# The parts scripts.go puts between the prologue and a script (scriptParts).
parts=
case "$(basename "$lua")" in
take.lua) parts="share_state.lua share.lua slidinglog.lua" ;;
take_share.lua | take_share_batch.lua) parts=share_state.lua ;;
cancel.lua | retime.lua) parts=slidinglog.lua ;;
esac
if [ -f "$prologue" ] && [ "$(basename "$lua")" != prologue.lua ]; then
	# Each line "-- #include F" is replaced by F's text (composeScript),
	# twice over: an included block may include another.
	expand() { awk '/^[ \t]*-- #include /{f=$3; while ((getline l < f) > 0) print l; close(f); next} {print}'; }
	abs=$(cd "$(dirname "$lua")" && pwd)/$(basename "$lua")
	(cd "$src" && cat prologue.lua $parts "$abs" | expand | expand) >"$dir/script.lua"
else
	cp "$lua" "$dir/script.lua"
fi
sha=$(redis-cli -p $port script load "$(cat "$dir/script.lua")")
redis-benchmark -p $port -n 200 -c 1 -r 1000000000 EVALSHA "$sha" "$@" >/dev/null
callgrind_control -z $vpid >/dev/null 2>&1
redis-benchmark -p $port -n "$n" -c 1 -r 1000000000 EVALSHA "$sha" "$@" >/dev/null
callgrind_control -d $vpid >/dev/null 2>&1
sleep 0.5
f=$(ls -t "$dir"/cg.* | head -1)
ir=$(grep -m1 "^summary:\|^totals:" "$f" | awk '{print $2}')
cron=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null | awk '/:serverCron /{gsub(",", "", $1); print $1; exit}')
ir=$((ir - ${cron:-0}))
redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
wait $vpid 2>/dev/null || true
echo "$(basename "$lua") $*: $((ir / n)) instructions/call"
