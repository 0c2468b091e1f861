package redisstore

import (
	"strconv"
	"strings"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// schema is the version of the key layout. A change of layout changes it,
// so a new release never misreads keys written by an old one.
const schema = "v1"

// Key layout (P is the configured prefix, "throttle:" by default):
//
//	P v1:{S}:g:NAME:KEY   GCRA theoretical arrival time, µs (string), when Rate divides Per
//	P v1:{S}:G:NAME:KEY   GCRA theoretical arrival time otherwise, "us" or "us:frac" (string)
//	P v1:{S}:f:NAME:KEY   fixed window counts, window index -> count (hash)
//	P v1:{S}:w:NAME:KEY   sliding window counts, window index -> count (hash)
//	                      an Anchored limit's also hold 'a' (the phase, µs), 'e' (when the
//	                      state ends, µs), 'l' (the phase is the vendor's) and '<k>r' (the
//	                      latest reservation instant of window k); take.lua, anchor.lua
//	P v1:{S}:l:NAME:KEY   sliding log, member "instant:cost:id", score the running total of costs (zset)
//	P v1:{S}:c:NAME:KEY   concurrency slots, member lease id, score expiry µs (zset)
//	P v1:{S}:n:NAME:KEY   pub/sub channel (not a key): a slot of c:NAME:KEY was released
//	P v1:{S}:p:KEY        pause end, µs (string)
//	P v1:{S}:r:ID         a decision's reply, kept briefly for replays (string)
//	P v1:{S}:s:ID         the costs a reservation was settled to (string)
//	P v1:{S}:zA:NAME:KEY  fair shares: the state, members 'a'..tenant (score its last demand µs),
//	                      'v'..tenant (score -its share clock µs) and '#c' (share.lua) (zset)
//	P v1:{S}:kA:NAME:KEY  fair shares: claims, member tenant, score the claim's place µs (zset)
//	P v1:{S}:eA:NAME:KEY  fair shares: claims, member tenant, score the claim's instant µs (zset)
//	P v1:{S}:hA:NAME:KEY  lent headroom: class notes, headroom -> its latest note µs (hash)
//	P v1:{S}:x:NAME:KEY   MULTI/EXEC mode: window counter (string)
//	P v1:{S}:q:KEY        MULTI/EXEC mode: pause, as the key's TTL (string)
//
// S is the demand's scope, escaped so that it contains no '{' or '}'; it is
// the Cluster hash tag, so every key of one scope lives in one slot. The
// prefix must not contain '{' or '}' (New checks). NAME is a limit name
// (letters, digits and ._- only, checked), so the ':' after it ends it;
// KEY is the rest of the key and may contain anything without changing the
// slot, because Redis takes the tag from the first '{' to the next '}'.
//
// GCRA keys come in two kinds. When Rate divides Per (in µs), the emission
// interval T is a whole number of microseconds and so is every arrival
// time: g: keys hold the same integers, charged the same way, as before
// arrival times were kept exactly, so a fleet upgrading from that version
// shares them with its older instances. Any other GCRA limit (3 a second,
// 10^9 per 31 days) keeps an exact arrival time with a fraction of a
// microsecond, "us:frac" (take_gcra.lua), which the older version could
// neither read nor charge the same way (it rounded T up to the
// microsecond): its keys are G: keys, which the older version never
// reads. While the two versions run side by side, each counts such a limit
// apart; once every instance runs this one, the counters older instances
// wrote under g: expire within 2 s of their arrival times, and the G:
// counter starts from empty (a burst more at most).
//
// A is a limit key's algorithm letter (g or G, f, l or w; see algTag).
//
// Fair shares and class notes took their present keys in this release (zA:
// one sorted set for a counter's tenants and clocks, where tA: and one vA:
// string per tenant were; hA: a hash of notes, where oA: was a sorted
// set). An older instance reads and writes only the old keys: while both
// versions run, each orders its own demands' tenants and classes, and
// the limit itself (g:, f:, w:...) is shared and charged by both, so
// nothing is admitted beyond it. The old keys expire within their TTLs.

// keys builds the keys of one scope.
type keys struct {
	base string // P v1:{S}:
}

func newKeys(prefix, scope string) keys {
	var b strings.Builder
	b.Grow(len(prefix) + len(schema) + len(scope) + 8)
	b.WriteString(prefix)
	b.WriteString(schema)
	b.WriteString(":{")
	b.WriteString(escapeTag(scope))
	b.WriteString("}:")
	return keys{base: b.String()}
}

// escapeTag makes s safe inside a hash tag: '%', '{' and '}' are
// percent-encoded, and the empty scope becomes "%" (which no escaped
// non-empty scope can be), because Redis ignores an empty tag "{}".
func escapeTag(s string) string {
	if s == "" {
		return "%"
	}
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// algTag is the one-letter part of a limit key naming its algorithm, so
// state written under one algorithm is never read as another; GCRA has
// two, g: when Rate divides Per and G: otherwise (see the key layout).
func algTag(l *quota.Limit) string {
	switch l.Algorithm {
	case quota.FixedWindow:
		return "f:"
	case quota.SlidingLog:
		return "l:"
	case quota.SlidingWindow:
		return "w:"
	case quota.Concurrency:
		return "c:"
	}
	if ql := quotamath.Of(*l); l.Rate > 0 && l.Per >= time.Microsecond && !ql.Exact() {
		return "G:"
	}
	return "g:"
}

func (k keys) limit(b *quota.Bucket) string {
	var sb strings.Builder
	sb.Grow(len(k.base) + 3 + len(b.Limit.Name) + len(b.Key))
	k.writeLimit(&sb, b)
	return sb.String()
}

// writeLimit, writePause and writeReplay write what limit, pause and
// replay return, to build many keys in one allocation.
func (k keys) writeLimit(sb *strings.Builder, b *quota.Bucket) {
	sb.WriteString(k.base)
	sb.WriteString(algTag(&b.Limit))
	sb.WriteString(b.Limit.Name)
	sb.WriteByte(':')
	sb.WriteString(b.Key)
}

func (k keys) writePause(sb *strings.Builder, key string) {
	sb.WriteString(k.base)
	sb.WriteString("p:")
	sb.WriteString(key)
}

func (k keys) writeReplay(sb *strings.Builder, id string) {
	sb.WriteString(k.base)
	sb.WriteString("r:")
	sb.WriteString(id)
}

// released is the channel on which releases of b's slots are announced.
func (k keys) released(b *quota.Bucket) string {
	return k.base + "n:" + b.Limit.Name + ":" + b.Key
}

func (k keys) txCounter(b *quota.Bucket) string {
	return k.base + "x:" + b.Limit.Name + ":" + b.Key
}

func (k keys) pause(key string) string {
	var sb strings.Builder
	sb.Grow(len(k.base) + 2 + len(key))
	k.writePause(&sb, key)
	return sb.String()
}

func (k keys) txPause(key string) string { return k.base + "q:" + key }

// settlement is the key of what reservation id was settled to.
func (k keys) settlement(id string) string { return k.base + "s:" + id }

// formatInt is strconv.FormatInt in base 10.
func formatInt(n int64) string { return strconv.FormatInt(n, 10) }
