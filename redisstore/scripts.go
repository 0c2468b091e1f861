package redisstore

import (
	"embed"
	"slices"
	"strings"

	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

// Each operation is one script, run with [redis.Script.Run] (or
// Store.run, resend.go): EVALSHA, and EVAL when Redis answers NOSCRIPT
// (after SCRIPT FLUSH or a restart). Scripts are never pipelined: NOSCRIPT
// recovery does not work there.
//
// Every script is prologue.lua followed by its own file: Redis scripts
// cannot include one another, so the text is put together here, once,
// and the SHA is that of the whole. The prologue gives every script the
// same first two arguments, ARGV[1] the clock ("" for Redis's TIME; an
// instant only from tests) and ARGV[2] the call id ("" when the call needs
// none; "R", refused, when go-redis sends a marked call again), and
// defines now, slack, id and the algorithm codes of [algoCodes]. A
// script's own arguments start at ARGV[3]; each file's header lists them.
//
// A script may also have parts of its own, put between the prologue and
// its file (scriptParts): code kept in a file apart, but no script by
// itself.
//
// Every script of the package is embedded here.
//
//go:embed prologue.lua take.lua take_gcra.lua take_batch.lua take_window.lua
//go:embed cancel.lua pause.lua claim.lua release.lua renew.lua sync.lua anchor.lua settle.lua
//go:embed share.lua share_state.lua share_held.lua share_expire.lua share_claim.lua share_step.lua window_expiry.lua class_note.lua gcra_read.lua gcra_charge.lua gcra_write.lua slidinglog.lua take_share.lua take_share_batch.lua retime.lua shorten.lua
var luaFiles embed.FS

// scriptParts lists, by script, the files put between prologue.lua and
// the script's own file. share.lua holds take.lua's fair shares,
// slidinglog.lua the sliding logs with reservations ahead: the entries
// that take.lua and retime.lua place, and that cancel.lua and retime.lua
// remove (and shorten.lua moves); share_state.lua what take.lua and take_share.lua share of fair
// shares.
var scriptParts = map[string][]string{
	"take.lua":             {"share_state.lua", "share.lua", "slidinglog.lua"},
	"take_share.lua":       {"share_state.lua"},
	"take_share_batch.lua": {"share_state.lua"},
	"cancel.lua":           {"slidinglog.lua"},
	"retime.lua":           {"slidinglog.lua"},
	"shorten.lua":          {"slidinglog.lua"},
}

var (
	takeScript = newScript("take.lua")
	// take_gcra.lua is take.lua for demands whose limits are all GCRA
	// (see Store.Take): the same decision in fewer Redis commands.
	takeGCRAScript = newScript("take_gcra.lua")
	// take_batch.lua is take_gcra.lua for several demands of one scope
	// at once (WithBatching, batch.go).
	takeBatchScript = newScript("take_batch.lua")
	// take_share.lua is take.lua for a demand of one or two GCRA limits,
	// one of them shared among tenants (see Store.Take).
	takeShareScript = newScript("take_share.lua")
	// take_share_batch.lua is take_share.lua for several demands of one
	// scope at once (share_batch.go).
	takeShareBatchScript = newScript("take_share_batch.lua")
	// take_window.lua is take.lua for a demand of one fixed-window or
	// sliding-window limit (see Store.Take).
	takeWindowScript = newScript("take_window.lua")
	cancelScript     = newScript("cancel.lua")
	pauseScript      = newScript("pause.lua")
	// claim.lua takes the Concurrency slots of a reservation that came
	// due (Store.Claim, lease.go).
	claimScript = newScript("claim.lua")
	// release.lua frees released leases (Store.Release, releases.go).
	releaseScript = newScript("release.lua")
	// renew.lua extends leases (Store.Renew, lease.go).
	renewScript = newScript("renew.lua")
	// sync.lua lowers a counter to what the vendor reports (Store.Sync).
	syncScript = newScript("sync.lua")
	// anchor.lua moves an Anchored limit's windows (Store.Anchor).
	anchorScript = newScript("anchor.lua")
	// settle.lua corrects a charge to its real cost (Store.Settle).
	settleScript = newScript("settle.lua")
	// retime.lua moves a late grant's charges to now (Store.Retime).
	retimeScript = newScript("retime.lua")
	// shorten.lua ends sliding log entries' counts early (Store.Shorten).
	shortenScript = newScript("shorten.lua")
)

// storeScripts lists every script the store runs; Check loads them all
// (by source: Script.Load on a pipeline would set a script's hash to the
// empty reply it has before Exec). TestCheck compares it with the
// package's .lua files.
var storeScripts = []luaScript{
	takeScript, takeGCRAScript, takeBatchScript, takeWindowScript, takeShareScript, takeShareBatchScript,
	cancelScript, pauseScript, claimScript, releaseScript, renewScript,
	syncScript, anchorScript, settleScript, retimeScript, shortenScript,
}

// A luaScript is a script with its source, so that Store.run can send it
// as EVAL when Redis answers NOSCRIPT.
type luaScript struct {
	*redis.Script
	src string
	// hashArg and srcArg are the SHA and src as arguments of a command,
	// boxed once (Store.send).
	hashArg, srcArg any
}

// newScript returns the script of the embedded file name: prologue.lua,
// then the file.
func newScript(name string) luaScript {
	src := composeScript(name)
	sc := redis.NewScript(src)
	return luaScript{Script: sc, src: src, hashArg: sc.Hash(), srcArg: src}
}

// composeScript returns the text of the script of the embedded file name:
// prologue.lua, its parts, then the file, each line "-- #include F" of
// them replaced by the text of F (a block of code, where a function would
// cost a closure per call). The names are those embedded above
// (go:embed), so reading cannot fail but for a misspelt name, which every
// test of the package would show at once.
func composeScript(name string) string {
	var src strings.Builder
	for _, f := range slices.Concat([]string{"prologue.lua"}, scriptParts[name], []string{name}) {
		include(&src, f)
	}
	return src.String()
}

// include writes the text of the embedded file f to src, each line
// "-- #include F" replaced by F's text, itself included so (an included
// block may include another: gcra_charge.lua, gcra_write.lua).
func include(src *strings.Builder, f string) {
	for line := range strings.Lines(readLua(f)) {
		if inc, ok := strings.CutPrefix(strings.TrimSpace(line), includeMark); ok {
			include(src, inc)
			continue
		}
		src.WriteString(line)
	}
}

// includeMark begins a line that composeScript replaces by a file's text.
const includeMark = "-- #include "

// readLua returns the text of the embedded file name.
func readLua(name string) string {
	text, err := luaFiles.ReadFile(name)
	if err != nil {
		panic("redisstore: " + err.Error())
	}
	return string(text)
}

// algoCodes are the algorithm codes of the scripts' arguments. prologue.lua
// defines a Lua constant of each name with the same code, and
// TestAlgoCodes checks that the two agree.
var algoCodes = [...]struct {
	algo quota.Algorithm
	name string // the Lua constant
	code string
}{
	{quota.GCRA, "GCRA", "0"},
	{quota.FixedWindow, "FIXED_WINDOW", "1"},
	{quota.SlidingLog, "SLIDING_LOG", "2"},
	{quota.SlidingWindow, "SLIDING_WINDOW", "3"},
	{quota.Concurrency, "CONCURRENCY", "4"},
}

// algoCode is a's code in the scripts' arguments, or "" for an algorithm
// the scripts do not know (Limit.Validate refuses it before any call).
func algoCode(a quota.Algorithm) string {
	for _, c := range algoCodes {
		if c.algo == a {
			return c.code
		}
	}
	return ""
}

// scriptArgs starts the arguments of a script call with prologue.lua's
// two: the clock ("" for Redis's TIME, except in tests) and the call id.
// When marked and the store marks its calls ([ReplayDetect]), the id is
// written by a resendMark, which is returned too; size is the number of
// arguments the caller adds after these.
func (s *Store) scriptArgs(size int, id string, marked bool) ([]any, *resendMark) {
	args := make([]any, 0, 2+size)
	if marked && s.detect {
		m := newResendMark(id)
		return append(args, s.nowArg(), m), m
	}
	return append(args, s.nowArg(), id), nil
}

// markedArgs is scriptArgs(size, id, true) for a call of nkeys keys: when
// the store marks its calls, the arguments start in the mark's own array
// where Store.send puts them, after the command's name, script and keys,
// so that a call whose arguments fit makes no slice for them.
func (s *Store) markedArgs(nkeys, size int, id string) ([]any, *resendMark) {
	if !s.detect {
		return s.scriptArgs(size, id, true)
	}
	m := newResendMark(id)
	var args []any
	if at := 3 + nkeys; at+2+size <= len(m.all) {
		args = m.all[at:at]
	} else {
		args = make([]any, 0, 2+size)
	}
	return append(args, s.nowArg(), m), m
}
