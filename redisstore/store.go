package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

// Store is a [quota.Store] kept in Redis, shared by every instance of a
// service that uses the same Redis and prefix. Each decision is one
// EVALSHA that reads Redis's clock, checks every limit and pause of the
// demand, and charges all limits or none. Store is safe for concurrent use.
type Store struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
	replay  Replay
	now     func() time.Time // tests only; nil: Redis's TIME
	generic bool             // tests only: take.lua even for GCRA-only demands

	replayMS      int64 // how long a reply is remembered; 0: not at all
	detect        bool  // ReplayDetect: calls carry a resendMark
	replayArg     any   // replayMS, boxed once for the scripts' arguments
	idBase        string
	seq           atomic.Uint64
	reload        reloader      // cluster state reloads on connection errors
	hub           hub           // lease.go: release notifications
	releases      releaseQueue  // releases.go: released leases not yet sent
	linger        time.Duration // releases.go: releaseLinger, but in tests
	batchMax      int           // WithBatching; below 2: no batches
	batchInFlight int           // calls of a scope in flight before demands wait
	slotInFlight  int           // the same for demands with Concurrency limits
	batch         batcher       // batch.go
	deadlines     callDeadlines
	lastKeys      atomic.Pointer[scopeKeys] // keysOf: the keys of the scope decided last
	hints         *busyHints                // busyhint.go: take_gcra.lua's order
	chargeOrder   int                       // tests only: 1 charge first, -1 read first, 0 as hinted
}

// scopeKeys are the keys of one scope, kept by Store.keysOf.
type scopeKeys struct {
	scope string
	ks    keys
}

// keysOf returns the keys of scope, whose base (prefix, schema and
// hash tag) is built once for the scope decided last: most stores decide
// one or a few scopes, so a decision rarely builds it.
func (s *Store) keysOf(scope string) keys {
	if k := s.lastKeys.Load(); k != nil && k.scope == scope {
		return k.ks
	}
	k := &scopeKeys{scope: scope, ks: newKeys(s.prefix, scope)}
	s.lastKeys.Store(k)
	return k.ks
}

var _ quota.Store = (*Store)(nil)

// New returns a Store that keeps its state in Redis through client, which
// may be a *redis.Client (single node, Sentinel), a *redis.ClusterClient or
// a *redis.Ring. See the package documentation for the key layout, the
// Cluster trade-off and what happens when Redis fails. New does not
// contact Redis.
//
// New logs a warning (with [slog.Default]) when the client's ReadTimeout
// or WriteTimeout is shorter than [MinClientTimeout]: a slow reply would
// then fail as if Redis were down. [Store.Check] reports the same as an
// error matching quota.ErrStoreConfig.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s := &Store{client: client, prefix: DefaultPrefix, timeout: DefaultTimeout, batchMax: DefaultBatchMax, batchInFlight: BatchInFlight, slotInFlight: slotBatchInFlight, linger: releaseLinger, hints: newBusyHints()}
	for _, o := range opts {
		o(s)
	}
	s.reload.init(client)
	if strings.ContainsAny(s.prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", s.prefix)
	}
	retries := mayRetry(client)
	switch s.replay {
	case ReplayAuto:
		switch {
		case !retries:
		case detectable(client):
			s.detect = true
		default:
			s.replayMS = s.replayWindow()
		}
	case ReplayDetect:
		s.detect = true
	case ReplayIDs:
		s.replayMS = s.replayWindow()
	case replayOffForTest:
	case ReplayNoRetries:
		if retries {
			return nil, errors.New("redisstore: ReplayNoRetries needs a client that never retries (MaxRetries -1, and MaxRedirects -1 for a ClusterClient)")
		}
	default:
		return nil, fmt.Errorf("redisstore: unknown Replay %d", s.replay)
	}
	s.replayArg = s.replayMS
	if err := s.checkTimeouts(); err != nil {
		slog.Warn("redisstore: client timeouts shorter than redisstore.MinClientTimeout; Store.Check reports this as an error", "err", err)
	}
	var b [9]byte
	_, _ = rand.Read(b[:]) // never fails; see crypto/rand.Read
	s.idBase = base64.RawURLEncoding.EncodeToString(b[:]) + "."
	return s, nil
}

// replayWindow is how long, in ms, a decision's reply is remembered: past
// every retry go-redis can make within the per-call timeout, which ends
// the call and its retries.
func (s *Store) replayWindow() int64 {
	return max(time.Second, s.timeout+time.Second).Milliseconds()
}

// mayRetry reports whether client may send a command again after a
// network error, which would run a script twice.
func mayRetry(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().MaxRetries > 0
	case *redis.Ring:
		return c.Options().MaxRetries > 0
	case *redis.ClusterClient:
		o := c.Options()
		return o.MaxRetries > 0 || o.MaxRedirects > 0
	}
	return true
}

// nextID returns an id unique to this decision among all stores.
func (s *Store) nextID() string {
	var buf [32]byte
	return string(strconv.AppendUint(append(buf[:0], s.idBase...), s.seq.Add(1), 36))
}

// identify gives a granted reservation whose call needed no id one, so
// that it can be settled (settle.go). dec and err are a take's result.
func (s *Store) identify(dec quota.Decision, err error) (quota.Decision, error) {
	if err == nil && dec.Reservation != nil && dec.Reservation.ID == "" {
		dec.Reservation.ID = s.nextID()
	}
	return dec, err
}

// callContext bounds one call to the per-call timeout. A ctx that ends
// sooner already bounds it, and then no timer is started.
func (s *Store) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout <= 0 {
		return ctx, noCancel
	}
	if ctx == context.Background() || ctx == context.TODO() {
		return s.deadlines.get(s.timeout), noCancel
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.timeout {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, s.timeout)
}

func noCancel() {}

// nowArg is the instant the scripts use: "" (Redis's TIME) except in tests.
func (s *Store) nowArg() string {
	if s.now == nil {
		return ""
	}
	return formatInt(s.now().UnixMicro())
}

// Take implements [quota.Store.Take] in one round trip. An error wraps
// the go-redis or context error; the demand may then have been charged.
//
// A demand whose limits are all GCRA, the common case, runs
// take_gcra.lua (or goes in a batch: [WithBatching]); one of GCRA and
// Concurrency limits runs take_batch.lua, alone or in a batch; one of a
// single fixed-window or sliding-window limit runs take_window.lua; one
// of one or two GCRA limits, one shared among tenants, runs
// take_share.lua, alone or in a batch (take_share_batch.lua). All decide
// as take.lua does, in fewer Redis commands, and are used unless replies
// are remembered ([ReplayIDs]). Any other runs take.lua.
func (s *Store) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	if err := d.Validate(); err != nil {
		return quota.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	// plain: GCRA and Concurrency limits only, none shared among tenants
	// (take_share.lua or take.lua, with share.lua).
	plain := len(d.Limits) > 0 && !s.generic && !d.Shared()
	gcraOnly, slots, needID := plain, false, s.replayMS > 0
	for i := range d.Limits {
		switch d.Limits[i].Limit.Algorithm {
		case quota.GCRA:
		case quota.Concurrency: // lease.go
			gcraOnly, slots, needID = false, true, true // the id is the lease's
		case quota.SlidingLog:
			plain, gcraOnly, needID = false, false, true // the id names the log entry
		default:
			plain, gcraOnly = false, false
		}
	}
	if plain && s.replayMS == 0 {
		// take_gcra.lua or take_batch.lua (batch.go)
		if s.batchMax > 1 {
			return s.takeBatched(ctx, d, slots)
		}
		return s.takeAlone(ctx, d, slots)
	}
	if s.shareBatched(d) { // take_share.lua, or batched (share_batch.go)
		return s.takeBatched(ctx, d, false)
	}
	return s.take(ctx, d, gcraOnly, needID)
}

// take decides d, checked, in a call of its own. gcraOnly: every limit is
// GCRA (take_gcra.lua); needID: the call needs a decision id.
func (s *Store) take(ctx context.Context, d *quota.Demand, gcraOnly, needID bool) (quota.Decision, error) {
	var id string
	if needID {
		id = s.nextID()
	}
	var replayID string
	if s.replayMS > 0 {
		replayID = id
	}
	keys := s.takeKeys(d, replayID)
	maxWait := demandMaxWait(d)
	script := takeScript
	var args []any
	window := !s.generic && s.replayMS == 0 && len(d.Limits) == 1 && len(d.Pauses) <= 1 && d.Limits[0].Tenant == "" &&
		d.Limits[0].Limit.Windowed() && !d.Limits[0].Limit.Anchored
	share := !s.generic && s.replayMS == 0 && !gcraOnly && shareFast(d) // share.go
	var mark *resendMark
	var carried []leaseRelease // releases.go: take.lua carries them
	var hint *hinted           // a demand whose order take_gcra.lua takes from busyHints
	switch {
	case window:
		script = takeWindowScript
		l := &d.Limits[0].Limit
		args, mark = s.markedArgs(len(keys), 6, id)
		args = append(args, algoCode(l.Algorithm), maxWait, windowPer(l), l.Rate-d.Limits[0].Headroom, d.CostOf(0), phaseArg(l))
		if d.Limits[0].Noted() {
			keys, args = s.appendNote(keys, args, &d.Limits[0], d.Scope) // share.go
		}
	case gcraOnly:
		script = takeGCRAScript
		args, mark = s.markedArgs(len(keys), 2+2*len(d.Limits), id)
		exact := gcraExact(d)
		args = appendGCRAPairs(append(args, maxWait), d)
		if mode := gcraMode(s.replayMS, exact); mode != "" {
			args = append(args, mode)
		} else if room, ok := args[len(args)-1].(int64); ok && exact && len(d.Limits) == 1 && len(d.Pauses) <= 1 {
			// take_gcra.lua's order (busyhint.go): MaxWait sent as
			// -(MaxWait+1) charges the key first.
			hint = &hinted{hash: s.hints.hash(keys[len(d.Pauses)]), allowance: time.Duration(room) * time.Microsecond}
			if s.chargeFirst(hint, maxWait) {
				args[len(args)-3] = -maxWait - 1
			}
		}
	case share:
		script = takeShareScript
		args, mark = s.scriptArgs(8+2*len(d.Limits), id, true)
		keys, args = s.appendShare(keys, appendGCRAPairs(append(args, maxWait), d), d)
	default:
		var err error
		if carried, err = s.releases.carry(ctx, d.Scope); err != nil {
			return quota.Decision{}, fmt.Errorf("redisstore: take: %w", err)
		}
		shares := sharedLimits(d) // share.go
		args, mark = s.scriptArgs(5+5*len(d.Limits)+8*shares+2*len(carried), id, true)
		args = append(args, maxWait, len(d.Pauses), s.replayArg, len(carried), shares)
		for i := range d.Limits {
			b, cost := &d.Limits[i], int64(d.CostOf(i))
			l, h := &b.Limit, int64(b.Headroom)
			switch l.Algorithm {
			case quota.GCRA:
				charge, room := gcraArgs(b, cost)
				args = append(args, algoCode(l.Algorithm), charge, room, cost, 0)
			case quota.Concurrency: // lease.go
				args = append(args, algoCode(l.Algorithm), l.Per.Microseconds(), int64(l.Rate)-h, 1, 0)
			default:
				args = append(args, algoCode(l.Algorithm), windowPer(l), int64(l.Rate)-h-cost, cost, bucketPhaseArg(b))
			}
		}
		if shares > 0 {
			keys, args = s.appendShares(keys, args, d)
		}
		keys, args = appendReleases(keys, args, carried)
	}

	ctx, cancel := s.callContext(ctx)
	defer cancel()
	cmd := s.run(ctx, script, mark, keys, args...)
	if window || gcraOnly || share {
		res, err := cmd.Result()
		if err != nil {
			s.reload.note(err)
			return quota.Decision{}, fmt.Errorf("redisstore: take: %w", s.configErr(resent(err)))
		}
		dec, err := s.identify(parseTakeFast(res, d, id))
		if hint != nil && err == nil {
			s.hints.note(hint.hash, time.Now(), dec, hint.allowance)
		}
		return dec, err
	}
	res, err := cmd.Slice()
	if err != nil {
		s.reload.note(err)
		s.releases.giveBack(s, d.Scope, carried, releaseRetry)
		return quota.Decision{}, fmt.Errorf("redisstore: take: %w", s.configErr(resent(err)))
	}
	return s.identify(parseTake(res, d, id))
}

// phaseArg is the scripts' phase argument of a window limit l: the phase
// of its windows in µs (modulo Per), or -1 for an Anchored limit, whose
// phase the counter keeps (take.lua).
func phaseArg(l *quota.Limit) int64 {
	if l.Anchored {
		return -1
	}
	return quotamath.Of(*l).Phase
}

// bucketPhaseArg is the phase argument of take.lua and retime.lua for
// bucket b: phaseArg of its limit, or for a sliding log its
// [quota.LogExpiry], "every:phase:spread:reach" in µs (slidinglog.lua's
// logExpiry), 0 for none.
func bucketPhaseArg(b *quota.Bucket) any {
	if b.Limit.Algorithm != quota.SlidingLog || b.Expiry.Every <= 0 {
		return phaseArg(&b.Limit)
	}
	e := quotamath.Of(b.Limit).WithExpiry(b.Expiry).Expiry
	return formatInt(e.Every) + ":" + formatInt(e.Phase) + ":" + formatInt(e.Spread) + ":" + formatInt(e.Reach)
}

// gcraMode is take_gcra.lua's last argument, "" when it is left out (the
// common case): "M", the reply remembered for M ms, and " f" after it
// unless exact (every limit's emission interval is whole microseconds,
// gcraExact).
func gcraMode(replayMS int64, exact bool) string {
	if replayMS == 0 && exact {
		return ""
	}
	if exact {
		return formatInt(replayMS)
	}
	return formatInt(replayMS) + " f"
}

// gcraExact reports whether the emission interval of every limit of d,
// all GCRA, is a whole number of microseconds: then no argument or
// arrival time of the take has a fraction (take_gcra.lua).
func gcraExact(d *quota.Demand) bool {
	for i := range d.Limits {
		if l := quotamath.Of(d.Limits[i].Limit); !l.Exact() {
			return false
		}
	}
	return true
}

// demandMaxWait returns the MaxWait the scripts take for d, in µs: at
// most T/2 for a demand with a headroom or a tenant, which reserves no
// further ahead (quotamath.RestrictedWait).
func demandMaxWait(d *quota.Demand) int64 {
	wait := max(d.MaxWait, 0).Microseconds()
	if d.Restricted() {
		wait = min(wait, quotamath.RestrictedWait(d))
	}
	return wait
}

// appendGCRAPairs appends take_gcra.lua's two arguments per limit of d,
// whose limits are all GCRA: the charge cost*T and the allowance
// (Burst-h)*T - cost*T, h the bucket's headroom (gcraArgs).
func appendGCRAPairs(args []any, d *quota.Demand) []any {
	for i := range d.Limits {
		charge, room := gcraArgs(&d.Limits[i], int64(d.CostOf(i)))
		args = append(args, charge, room)
	}
	return args
}

// gcraArgs returns what the scripts take per GCRA limit of bucket b for
// cost: the charge cost*T and the allowance (Burst-h)*T - cost*T, h b's
// headroom and T = Per/Rate exactly ([quotamath.Limit.Emissions]). When
// T is a whole number of µs they are integers, as they always were; else
// the charge is "q:r:Rate" and the allowance "q:r", q µs and r/Rate of
// one (take_gcra.lua).
func gcraArgs(b *quota.Bucket, cost int64) (charge, room any) {
	ql := quotamath.Of(b.Limit).Less(int64(b.Headroom))
	if ql.Exact() {
		t := ql.Per / ql.Rate
		return cost * t, (ql.Burst - cost) * t
	}
	c, a := ql.Emissions(cost), ql.Emissions(ql.Burst-cost)
	return timeArg(c, ql.Rate), timeArg(a, 0)
}

// timeArg formats t for the scripts: "q" when it is whole microseconds,
// else "q:r", and "q:r:rate" when rate is not 0 (the scripts need it to
// carry a sum's fraction).
func timeArg(t quotamath.Time, rate int64) string {
	var buf [64]byte
	b := strconv.AppendInt(buf[:0], t.Micros, 10)
	if t.Frac != 0 || rate != 0 {
		b = strconv.AppendInt(append(b, ':'), t.Frac, 10)
	}
	if rate != 0 {
		b = strconv.AppendInt(append(b, ':'), rate, 10)
	}
	return string(b)
}

// windowPer is what the scripts take as Per of a window limit l: Per in
// µs, except for a sliding window whose weight falls in steps of more
// than 1 µs ([quotamath.Limit.Steps]): "Per:s:W", the step and the steps
// per window (take_window.lua).
func windowPer(l *quota.Limit) any {
	ql := quotamath.Of(*l)
	if l.Algorithm == quota.SlidingWindow {
		if step, steps := ql.Steps(); step > 1 {
			return formatInt(ql.Per) + ":" + formatInt(step) + ":" + formatInt(steps)
		}
	}
	return ql.Per
}

// takeKeys returns the keys of a take, in the scripts' order: pauses,
// limits, then the replay key when replayID is not "". They are cut from
// one string, so a decision allocates its key names once.
func (s *Store) takeKeys(d *quota.Demand, replayID string) []string {
	ks := s.keysOf(d.Scope)
	n := len(d.Pauses) + len(d.Limits)
	size := 0
	for _, p := range d.Pauses {
		size += len(ks.base) + 2 + len(p)
	}
	for i := range d.Limits {
		b := &d.Limits[i]
		size += len(ks.base) + 3 + len(b.Limit.Name) + len(b.Key)
	}
	if replayID != "" {
		n++
		size += len(ks.base) + 2 + len(replayID)
	}
	var sb strings.Builder
	sb.Grow(size)
	var endsBuf [8]int
	ends := endsBuf[:0]
	for _, p := range d.Pauses {
		ks.writePause(&sb, p)
		ends = append(ends, sb.Len())
	}
	for i := range d.Limits {
		ks.writeLimit(&sb, &d.Limits[i])
		ends = append(ends, sb.Len())
	}
	if replayID != "" {
		ks.writeReplay(&sb, replayID)
		ends = append(ends, sb.Len())
	}
	all := sb.String()
	keys := make([]string, n)
	start := 0
	for i, end := range ends {
		keys[i] = all[start:end]
		start = end
	}
	return keys
}

// parseTakeFast reads the reply of take_gcra.lua, take_batch.lua and
// take_window.lua: the fields of take.lua's reply as a string of integers
// separated by spaces (a GCRA arrival time may be "us:frac").
func parseTakeFast(res any, d *quota.Demand, id string) (quota.Decision, error) {
	if tat, ok := res.(int64); ok {
		return decideIdle(tat, d, id)
	}
	v, ok := res.(string)
	if !ok {
		return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", res)
	}
	var buf, fbuf [8]int64
	n, fr, err := parseFields(v, buf[:0], fbuf[:0])
	if err != nil {
		return quota.Decision{}, err
	}
	return decide(n, fr, d, id, v)
}

// parseFields appends to n and fr the integers of a reply v of fields
// separated by spaces, and their fractions (parseField).
func parseFields(v string, n, fr []int64) ([]int64, []int64, error) {
	for f := range strings.SplitSeq(v, " ") {
		x, frac, err := parseField(f)
		if err != nil {
			return nil, nil, fmt.Errorf("redisstore: take: malformed reply %q", v)
		}
		n, fr = append(n, x), append(fr, frac)
	}
	return n, fr, nil
}

// decideIdle makes the Decision of take_gcra.lua's integer reply tat: a
// grant at Redis's clock on GCRA limits of whole microseconds whose
// buckets had no arrival time ahead of it, tat the first limit's new
// arrival time. Each limit's is the clock plus its charge, so the clock
// is tat less the first's charge, and the reply take_gcra.lua would
// otherwise have formatted is rebuilt here.
func decideIdle(tat int64, d *quota.Demand, id string) (quota.Decision, error) {
	if len(d.Limits) == 0 || len(d.Limits) > 2 {
		return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %d for %d limits", tat, len(d.Limits))
	}
	var buf, fbuf [8]int64
	n := append(buf[:0], 1, 0, -1, -1, 0, -1)
	for i := range d.Limits {
		b := &d.Limits[i]
		ql := quotamath.Of(b.Limit)
		if b.Limit.Algorithm != quota.GCRA || !ql.Exact() {
			return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %d", tat)
		}
		charge := int64(d.CostOf(i)) * (ql.Per / ql.Rate)
		if i == 0 {
			n[4] = tat - charge
		}
		n = append(n, n[4]+charge)
	}
	return decide(n, fbuf[:len(n)], d, id, nil) // nil: no tat boxed (an allocation) for errors only
}

// parseTake reads take.lua's reply.
func parseTake(res []any, d *quota.Demand, id string) (quota.Decision, error) {
	var buf, fbuf [8]int64
	n, fr := buf[:0], fbuf[:0]
	for _, x := range res {
		var v, frac int64
		switch x := x.(type) {
		case int64:
			v = x
		case string: // a GCRA arrival time with a fraction
			var err error
			if v, frac, err = parseField(x); err != nil {
				return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", res)
			}
		default:
			return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", res)
		}
		n, fr = append(n, v), append(fr, frac)
	}
	return decide(n, fr, d, id, res)
}

// parseField reads one field of a take's reply: an integer, or a GCRA
// arrival time "us:frac" (whole microseconds and a fraction in units of
// 1/Rate µs, take_gcra.lua).
func parseField(f string) (v, frac int64, err error) {
	us, fs, ok := strings.Cut(f, ":")
	if !ok {
		// Only an integer: a failed ParseInt allocates its error, and a
		// reply with fractions would pay it on every decision.
		v, err = strconv.ParseInt(f, 10, 64)
		return v, 0, err
	}
	if v, err = strconv.ParseInt(us, 10, 64); err != nil {
		return 0, 0, err
	}
	if frac, err = strconv.ParseInt(fs, 10, 64); err != nil || frac <= 0 {
		return 0, 0, fmt.Errorf("bad fraction in %q", f)
	}
	return v, frac, nil
}

// decide makes the Decision of a take's reply n: granted or not, the
// delay in µs, the binding limit and pause indexes, and for a grant the
// store's clock, what the limits other than GCRA admit now (-1: none has
// a say) and the marks, with fr the fractions of the GCRA arrival times
// (0 elsewhere). reply is only printed in errors; nil prints n.
func decide(n, fr []int64, d *quota.Demand, id string, reply any) (quota.Decision, error) {
	if len(n) < 4 || n[0] == 1 && len(n) < 6 {
		return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", replyOf(reply, n))
	}
	ok, delay, limit, pause := n[0] == 1, n[1], n[2], n[3]
	if delay < 0 {
		return quota.Decision{}, fmt.Errorf("redisstore: take: negative delay %d in reply", delay)
	}
	dec := quota.Decision{OK: ok, Delay: time.Duration(delay) * time.Microsecond, Limit: -1}
	if !ok {
		if limit < -1 || limit >= int64(len(d.Limits)) || pause < -1 || pause >= int64(len(d.Pauses)) {
			return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", replyOf(reply, n))
		}
		dec.Limit = int(limit)
		if limit < 0 && pause >= 0 {
			dec.Pause = d.Pauses[pause]
		}
		return dec, nil
	}
	now, remaining, marks, fracs := n[4], n[5], n[6:], fr[6:]
	if len(marks) != len(d.Limits) {
		return quota.Decision{}, fmt.Errorf("redisstore: take: reply has %d marks for %d limits", len(marks), len(d.Limits))
	}
	r := newReservation(d, id)
	dec.Reservation, dec.At = r, time.UnixMicro(now)
	// Remaining and ResetAfter (quota.Decision defines them): the reply's
	// remaining for the other limits, GCRA's from the arrival times; the
	// latest end of the charges.
	if remaining < 0 {
		remaining = math.MaxInt64
	}
	end := now
	for i := range d.Limits {
		b := &d.Limits[i]
		l := quotamath.Of(b.Limit).Less(int64(b.Headroom))
		r.Marks[i] = marks[i]
		if l.Algorithm == quota.GCRA {
			tat := quotamath.Time{Micros: marks[i], Frac: fracs[i]}
			if tat.Frac >= l.Rate {
				return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", replyOf(reply, n))
			}
			r.Marks[i] = l.Mark(tat)
			if dec.Delay == 0 {
				remaining = min(remaining, l.State(quotamath.Counter{TAT: tat}, now).Remaining)
			}
		} else if fracs[i] != 0 {
			return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", replyOf(reply, n))
		}
		end = max(end, l.ChargeEnd(r.Marks[i]))
	}
	markUnclaimed(r) // lease.go
	dec.ResetAfter = quotamath.Micros(end - now)
	if dec.Delay == 0 && len(d.Limits) > 0 {
		dec.Remaining = max(remaining, 0)
	}
	return dec, nil
}

// replyOf is what decide prints of a reply: reply, or when it is nil the
// fields n, copied so that n (on the caller's stack) does not escape.
func replyOf(reply any, n []int64) any {
	if reply != nil {
		return reply
	}
	return slices.Clone(n)
}

// newReservation returns a Reservation of d with room for its marks, in
// one allocation for demands of up to two limits.
func newReservation(d *quota.Demand, id string) *quota.Reservation {
	n := len(d.Limits)
	if n > 2 {
		return &quota.Reservation{Demand: d, Marks: make([]int64, n), ID: id}
	}
	rm := &struct {
		r quota.Reservation
		m [2]int64
	}{}
	rm.r = quota.Reservation{Demand: d, Marks: rm.m[:n:n], ID: id}
	return &rm.r
}

// Cancel implements [quota.Store.Cancel] in one round trip.
func (s *Store) Cancel(ctx context.Context, r *quota.Reservation) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return errors.New("redisstore: cancel: malformed reservation")
	}
	if len(r.Marks) == 0 {
		return nil
	}
	d := r.Demand
	ks := newKeys(s.prefix, d.Scope)
	keys := make([]string, len(d.Limits))
	args, mark := s.scriptArgs(5*len(d.Limits), r.ID, true)
	for i := range d.Limits {
		b, cost := &d.Limits[i], int64(d.CostOf(i))
		keys[i] = ks.limit(b)
		l := b.Limit
		p, rate := l.Per.Microseconds(), int64(l.Rate)
		if l.Algorithm == quota.GCRA {
			if rate <= 0 || p <= 0 || cost < 0 {
				return errors.New("redisstore: cancel: malformed reservation")
			}
			// The charge "q:r:Rate" and the mark "us:ns" (cancel.lua).
			ql, us := quotamath.Of(l), quotamath.FloorDiv(r.Marks[i], 1000)
			mark := formatInt(us) + ":" + formatInt(r.Marks[i]-us*1000)
			args = append(args, algoCode(l.Algorithm), timeArg(ql.Emissions(cost), rate), mark, cost, 0)
		} else if l.Algorithm == quota.Concurrency { // lease.go
			args = append(args, algoCode(l.Algorithm), ks.released(b), r.Marks[i], 1, 0)
		} else {
			args = append(args, algoCode(l.Algorithm), p, r.Marks[i], cost, phaseArg(&l))
		}
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	if err := s.run(ctx, cancelScript, mark, keys, args...).Err(); err != nil {
		s.reload.note(err)
		return fmt.Errorf("redisstore: cancel: %w", s.configErr(resent(err)))
	}
	return nil
}

// Pause implements [quota.Store.Pause] in one round trip, on Redis's
// clock. A non-positive d is a no-op.
func (s *Store) Pause(ctx context.Context, scope, key string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	us := int64(d / time.Microsecond)
	if d%time.Microsecond != 0 {
		us++
	}
	ks := newKeys(s.prefix, scope)
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	if err := pauseScript.Run(ctx, s.client, []string{ks.pause(key)}, s.nowArg(), "", us).Err(); err != nil {
		s.reload.note(err)
		return fmt.Errorf("redisstore: pause: %w", s.configErr(err))
	}
	return nil
}
