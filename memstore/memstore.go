// Package memstore is the in-process store: the default of
// throttle.NewTransport, exact and safe for concurrent use. Its counters
// are private to the process; package redisstore shares them across a
// fleet.
package memstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// Store is the in-process [quota.Store]: exact, safe for concurrent use,
// and the default of throttle.NewTransport when no store is given. It
// implements every [quota.Algorithm] with the same semantics as the Redis
// store, but its counters are private to the process: two instances of a
// service with a memstore each get the whole quota.
//
// Memory is bounded by the active keys: a key whose state no longer
// matters (its window has passed, its GCRA time is behind the clock) is
// dropped by a sweep that runs as decisions are made.
type Store struct {
	now func() time.Time

	mu      sync.Mutex
	buckets map[bucketID]*memBucket
	pauses  map[pauseID]int64        // pause end, µs
	shared  map[bucketID]*shareState // share.go: counters shared among tenants
	sweepAt int                      // len(buckets)+len(pauses)+len(settled)+len(shared) that triggers a sweep
	ops     int                      // decisions since the last sweep
	idN     uint64                   // reservation ids handed out
	ids     idBlock                  // ids formatted ahead (nextID)
	watch   map[bucketID]*waitList
	settled map[string]settlement // settle.go: by reservation id
}

var _ quota.Store = (*Store)(nil)

// An Option configures a [Store].
type Option func(*Store)

// WithClock makes the store read the time from now instead of
// [time.Now], for tests. A nil now leaves the default.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// New returns an empty in-process store.
func New(opts ...Option) *Store {
	s := &Store{
		now:     time.Now,
		buckets: make(map[bucketID]*memBucket),
		pauses:  make(map[pauseID]int64),
		settled: make(map[string]settlement),
		shared:  make(map[bucketID]*shareState),
		sweepAt: minSweep,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

type bucketID struct{ scope, name, key string }

type pauseID struct{ scope, key string }

// memBucket is the state of one counter. Which fields are used depends on
// the algorithm.
type memBucket struct {
	alg     quota.Algorithm
	tat     quotamath.Time       // GCRA: theoretical arrival time
	windows []window             // FixedWindow, SlidingWindow: counts by window, ascending
	phase   int64                // an Anchored window limit's phase, µs in [0, Per), once phased
	phased  bool                 // phase is set: by the first charge, a sync or an anchor
	learned bool                 // phase is the vendor's, set by an anchor
	log     []quotamath.LogEntry // SlidingLog: admitted demands, ascending by time
	leases  []lease              // Concurrency: slots held
	expire  int64                // µs after which the state equals a fresh bucket
}

type window struct {
	idx   int64 // window k covers [F + k*P, F + (k+1)*P)
	count int64
	last  int64 // the latest instant charged to it (quotamath.WindowCount)
}

// params are a limit's numbers in store units, and the cost of a demand.
type params struct {
	quotamath.Limit
	cost int64
}

func newParams(l quota.Limit, cost int) params {
	return params{Limit: quotamath.Of(l), cost: int64(cost)}
}

// grid puts p on b's windows: an anchored limit's phase is b's once b
// has one.
func (b *memBucket) grid(p *params) {
	if p.Anchored && b.phased {
		p.Limit = p.WithPhase(b.phase)
	}
}

// setPhase gives b's windows their phase.
func (b *memBucket) setPhase(phase int64) {
	b.phase, b.phased = phase, true
}

// expireAnchor makes the bucket of an anchored limit fresh once its state
// has expired (no phase, no windows): the sweep drops such buckets only
// now and then, and an anchored counter's phase ends with it.
func (b *memBucket) expireAnchor(p *params, now int64) {
	if p.Anchored && b.phased && b.expire <= now {
		*b = memBucket{alg: b.alg}
	}
}

// demandParams returns the params of d's limit i: its cost, and its
// numbers less its headroom (quotamath.Limit.Less).
func demandParams(d *quota.Demand, i int) params {
	b := &d.Limits[i]
	p := params{Limit: quotamath.Of(b.Limit), cost: int64(d.CostOf(i))}
	// Each of these copies the limit (about 100 B); without a headroom
	// or an expiry they would return it unchanged.
	if b.Headroom > 0 {
		p.Limit = p.Limit.Less(int64(b.Headroom))
	}
	if b.Expiry.Every > 0 {
		p.Limit = p.Limit.WithExpiry(b.Expiry)
	}
	return p
}

// minSweep is the smallest number of entries at which sweeps run; between
// sweeps the number of entries may at most double, or 1024 decisions pass.
const (
	minSweep    = 1024
	sweepPeriod = 1024
	maxFixpoint = 1000
)

// Take implements [quota.Store.Take].
func (s *Store) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	if err := ctx.Err(); err != nil {
		return quota.Decision{}, fmt.Errorf("throttle: memory store: %w", err)
	}
	var psBuf [4]params
	ps, err := checkDemand(d, psBuf[:0])
	if err != nil {
		return quota.Decision{}, err
	}
	maxWait := max(d.MaxWait, 0).Microseconds()

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	s.maybeSweep(now)

	// Lent headrooms and fair shares (share.go): a demand with a
	// headroom or a tenant reserves at most T/2 ahead.
	var shBuf [2]share
	sh := s.shares(d, now, ps, shBuf[:0])
	if d.Restricted() {
		maxWait = min(maxWait, quotamath.RestrictedWait(d))
	}

	t, pause := now, -1
	for i, k := range d.Pauses {
		if until := s.pauses[pauseID{d.Scope, k}]; until > t {
			t, pause = until, i
		}
	}
	pauseEnd := t
	var bsBuf [4]*memBucket
	bs := bsBuf[:0]
	if len(d.Limits) > len(bsBuf) {
		bs = make([]*memBucket, 0, len(d.Limits))
	}
	bs = bs[:len(d.Limits)]
	for i := range d.Limits {
		l := &d.Limits[i]
		if b := s.buckets[bucketID{d.Scope, l.Limit.Name, l.Key}]; b != nil && b.alg == l.Limit.Algorithm {
			b.expireAnchor(&ps[i], now)
			b.grid(&ps[i])
			b.prune(&ps[i], now)
			bs[i] = b
		}
	}

	t, binding, err := common(ps, bs, t)
	if err != nil {
		return quota.Decision{}, err
	}

	if end, limit := heldBack(sh); limit >= 0 || t-now > maxWait {
		// Refused until t, or until a held headroom may be lent if that
		// is sooner (not before the pauses end); and while other
		// tenants' claims hold it back, not before they lapse.
		until, dec := t, quota.Decision{Limit: binding}
		if binding < 0 && pause >= 0 {
			dec.Pause = d.Pauses[pause]
		}
		if lend, lender := lendAt(sh); lend >= 0 && max(lend, pauseEnd) < t {
			until, dec = max(lend, pauseEnd), quota.Decision{Limit: lender}
		}
		if limit >= 0 && end >= until {
			// and if the limits do not admit it then, until they do
			// after it (a sliding log may admit it now and not then).
			if end, _, err = common(ps, bs, end); err != nil {
				return quota.Decision{}, err
			}
			until, dec = end, quota.Decision{Limit: limit}
		}
		dec.Delay = quotamath.Micros(until - now)
		if dec.Delay <= d.MaxWait {
			claimAll(sh, until) // it will come back then
		}
		return dec, nil
	}
	if dec, full := slotsFull(ps, bs, now, t); full {
		return dec, nil
	}

	r := newReservation(d)
	r.ID = s.nextID() // settle.go's records and lease.go's leases are by id
	for i := range d.Limits {
		l := &d.Limits[i]
		if l.Limit.Algorithm == quota.Concurrency {
			if t > now { // memlease.go: claimed when it comes due
				r.Unclaimed = true
				continue
			}
		}
		b := bs[i]
		if b == nil {
			b = &memBucket{alg: l.Limit.Algorithm}
			s.buckets[bucketID{d.Scope, l.Limit.Name, l.Key}] = b
			bs[i] = b
		}
		if l.Limit.Algorithm == quota.Concurrency {
			r.Marks[i] = b.hold(ps[i], now, r.ID)
			continue
		}
		if ps[i].Anchored && !b.phased {
			// An anchored counter starts its first window at its first
			// charge (quota.Limit.Anchored).
			b.setPhase(quotamath.FloorMod(t, ps[i].Per))
			b.grid(&ps[i])
		}
		r.Marks[i] = b.commit(&ps[i], t)
	}
	charged(sh, t)
	s.ops++
	dec := quota.Decision{OK: true, Delay: quotamath.Micros(t - now), Limit: -1, Reservation: r, At: time.UnixMicro(now)}
	left(&dec, d, ps, bs, now)
	return dec, nil
}

// common returns the earliest instant, not before t, at which every
// limit admits its cost, and the index of the limit that last raised it
// (-1 if none did): instant' = max over limits of each one's earliest
// instant not before instant, until no limit raises it.
func common(ps []params, bs []*memBucket, t int64) (int64, int, error) {
	binding := -1
	for iter := 0; ; iter++ {
		if iter == maxFixpoint {
			return 0, 0, fmt.Errorf("throttle: memory store: no common instant for %d limits after %d rounds", len(ps), iter)
		}
		next, raiser := t, -1
		for i, b := range bs {
			if e := b.earliest(&ps[i], t); e > next {
				next, raiser = e, i
			}
		}
		if raiser < 0 {
			return t, binding, nil
		}
		t, binding = next, raiser
	}
}

// left sets Remaining and ResetAfter of dec, a decision granted at now
// whose charges bs hold (quota.Decision defines them).
func left(dec *quota.Decision, d *quota.Demand, ps []params, bs []*memBucket, now int64) {
	end := now
	for i := range ps {
		end = max(end, ps[i].ChargeEnd(dec.Reservation.Marks[i]))
	}
	dec.ResetAfter = quotamath.Micros(end - now)
	if dec.Delay > 0 || len(bs) == 0 {
		return
	}
	dec.Remaining = math.MaxInt64
	for i, b := range bs {
		if ps[i].Limit.Algorithm == quota.Concurrency && !d.SlotsOnly() {
			continue // free slots say nothing of the quota (quota.Decision)
		}
		rem := ps[i].State(b.counter(), now).Remaining
		if h := int64(d.Limits[i].Headroom); h > 0 && ps[i].Limit.Algorithm != quota.GCRA && ps[i].Rate == int64(d.Limits[i].Limit.Rate) {
			rem = max(rem-h, 0) // a lent headroom still counts as the demand's to leave
		}
		dec.Remaining = min(dec.Remaining, rem)
	}
}

// reservation is a Reservation with room for the marks of a few limits,
// so a decision allocates once.
type reservation struct {
	quota.Reservation
	marks [4]int64
}

func newReservation(d *quota.Demand) *quota.Reservation {
	rv := &reservation{Reservation: quota.Reservation{Demand: d}}
	if n := len(d.Limits); n <= len(rv.marks) {
		rv.Marks = rv.marks[:n]
	} else {
		rv.Marks = make([]int64, n)
	}
	return &rv.Reservation
}

// nextID returns a reservation id unique in the store: the lease id of
// its slots, and the key of its settlement. s.mu is held.
func (s *Store) nextID() string {
	if len(s.ids.ends) == 0 {
		s.ids.fill(s.idN)
	}
	s.idN++
	return s.ids.next()
}

// idsPerBlock is how many reservation ids one allocation holds.
const idsPerBlock = 64

// An idBlock holds the next reservation ids, "m" and a number in base 36
// each, formatted into one string: an id is a substring of it, so ids
// cost one allocation per idsPerBlock decisions rather than one each. A
// block stays in memory while any of its ids does, so the store keeps a
// copy of an id it holds long (a lease's, a settlement's).
type idBlock struct {
	s     string
	start int   // where the next id starts in s
	ends  []int // where each id still to hand out ends in s
	buf   [idsPerBlock]int
}

// fill formats the idsPerBlock ids after n (n+1, n+2, ...): n in base 36
// once, then each id by adding one to the digits of the one before.
func (b *idBlock) fill(n uint64) {
	var text [idsPerBlock * 14]byte // "m" and at most 13 base-36 digits each
	var num [14]byte
	digits := strconv.AppendUint(num[:0], n, 36)
	t := text[:0]
	b.ends = b.buf[:0]
	for range idsPerBlock {
		digits = increment36(digits)
		t = append(append(t, 'm'), digits...)
		b.ends = append(b.ends, len(t))
	}
	b.s, b.start = string(t), 0
}

// increment36 adds one to the base-36 number in d (digits 0-9a-z, the
// most significant first), in place; it grows d by a digit when every
// digit carries.
func increment36(d []byte) []byte {
	for i := len(d) - 1; i >= 0; i-- {
		switch d[i] {
		case 'z':
			d[i] = '0' // and carry
		case '9':
			d[i] = 'a'
			return d
		default:
			d[i]++
			return d
		}
	}
	d = append(d, '0')
	d[0] = '1'
	return d
}

// next hands out the block's next id.
func (b *idBlock) next() string {
	id := b.s[b.start:b.ends[0]]
	b.start, b.ends = b.ends[0], b.ends[1:]
	return id
}

// Cancel implements [quota.Store.Cancel].
func (s *Store) Cancel(ctx context.Context, r *quota.Reservation) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return fmt.Errorf("throttle: memory store: cancel: malformed reservation")
	}
	d := r.Demand
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	for i, l := range d.Limits {
		b := s.buckets[bucketID{d.Scope, l.Limit.Name, l.Key}]
		if b == nil || b.alg != l.Limit.Algorithm {
			continue
		}
		p := newParams(l.Limit, d.CostOf(i))
		b.expireAnchor(&p, now)
		b.grid(&p)
		if p.Algorithm == quota.Concurrency {
			s.drop(bucketID{d.Scope, l.Limit.Name, l.Key}, b, r.ID)
			continue
		}
		b.refund(&p, r.Marks[i])
		b.prune(&p, now)
	}
	return nil
}

// Pause implements [quota.Store.Pause].
func (s *Store) Pause(ctx context.Context, scope, key string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	until := s.now().UnixMicro() + quotamath.CeilMicros(d)
	id := pauseID{scope, key}
	if until > s.pauses[id] {
		s.pauses[id] = until
	}
	return nil
}

// maybeSweep drops expired state when enough decisions have passed or the
// maps have doubled since the last sweep. Amortized O(1) per decision.
func (s *Store) maybeSweep(now int64) {
	n := len(s.buckets) + len(s.pauses) + len(s.settled) + len(s.shared)
	if n < s.sweepAt && s.ops < sweepPeriod {
		return
	}
	s.ops = 0
	for id, b := range s.buckets {
		if b.expire <= now {
			delete(s.buckets, id)
		}
	}
	for id, until := range s.pauses {
		if until <= now {
			delete(s.pauses, id)
		}
	}
	for id, st := range s.settled {
		if st.expire <= now {
			delete(s.settled, id)
		}
	}
	for id, st := range s.shared {
		if st.empty(now) {
			delete(s.shared, id)
		}
	}
	s.sweepAt = max(minSweep, 2*(len(s.buckets)+len(s.pauses)+len(s.settled)+len(s.shared)))
}

// checkDemand rejects a demand no limit could ever grant and converts its
// limits to store units.
func checkDemand(d *quota.Demand, ps []params) ([]params, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	for i := range d.Limits {
		ps = append(ps, demandParams(d, i))
	}
	return ps, nil
}

// earliest returns the earliest instant, not before t, at which the
// bucket admits p.cost. A nil bucket is fresh.
func (b *memBucket) earliest(p *params, t int64) int64 {
	if b == nil || p.Algorithm == quota.Concurrency { // slotsFull decides
		return t
	}
	return p.Earliest(b.counter(), t, p.cost)
}

// counter is b's state as package quotamath reads it.
func (b *memBucket) counter() quotamath.Counter {
	c := quotamath.Counter{TAT: b.tat, Count: b.count, Log: b.log}
	if b.alg == quota.Concurrency {
		c.Expiries = b.expiries()
	}
	return c
}

// commit charges p.cost at instant t, which earliest allowed, and returns
// the mark that refund needs.
func (b *memBucket) commit(p *params, t int64) int64 {
	switch p.Algorithm {
	case quota.GCRA:
		b.tat = p.GCRACharge(b.tat, t, p.cost)
		b.expire = b.tat.Ceil()
		return p.Mark(b.tat)
	case quota.FixedWindow, quota.SlidingWindow:
		k := p.Window(t)
		b.add(k, p.cost, t)
		b.expireWindow(p, k)
		if p.Anchored {
			// The window's start: a refund after the windows moved finds
			// it on no boundary and gives nothing back (refund).
			return p.Start(k)
		}
		return k
	case quota.SlidingLog:
		// The entry's instant: t, or by the demand's Expiry. It goes
		// before later reservations.
		at := p.LogAt(t)
		b.log = quotamath.Insert(b.log, quotamath.LogEntry{At: at, Cost: p.cost})
		b.expire = max(b.expire, at+p.Per)
		return at
	}
	return 0
}

// expireWindow keeps b until window k no longer counts: its end, or for
// SlidingWindow the end of the next window, which weighs k as its previous.
func (b *memBucket) expireWindow(p *params, k int64) {
	end := p.Start(k + 1)
	if p.Algorithm == quota.SlidingWindow {
		end += p.Per
	}
	b.expire = max(b.expire, end)
}

// refund gives back a charge recorded by commit, as far as that is safe.
func (b *memBucket) refund(p *params, mark int64) {
	switch p.Algorithm {
	case quota.GCRA:
		if p.Mark(b.tat) == mark { // no later grant sits on the time this one skipped
			b.tat = p.GCRARefund(b.tat, p.cost)
		}
	case quota.FixedWindow, quota.SlidingWindow:
		if p.Anchored {
			// mark is the start of the window charged: on b's windows
			// still, unless they moved since.
			if !b.phased || quotamath.FloorMod(mark-p.Phase, p.Per) != 0 {
				return
			}
			mark = p.Window(mark)
		}
		b.add(mark, -p.cost, 0)
	case quota.SlidingLog:
		for i := len(b.log) - 1; i >= 0; i-- {
			if b.log[i] == (quotamath.LogEntry{At: mark, Cost: p.cost}) {
				b.log = slices.Delete(b.log, i, i+1)
				break
			}
		}
	}
}

// prune forgets state that can no longer affect a decision at or after now.
func (b *memBucket) prune(p *params, now int64) {
	switch p.Algorithm {
	case quota.FixedWindow, quota.SlidingWindow:
		keep := p.Window(now)
		if p.Algorithm == quota.SlidingWindow {
			keep--
		}
		if p.Anchored {
			keep-- // its units may fall in the windows a move makes (Anchor)
		}
		i := 0
		for i < len(b.windows) && b.windows[i].idx < keep {
			i++
		}
		b.windows = b.windows[i:]
	case quota.SlidingLog:
		i := 0
		for i < len(b.log) && b.log[i].At <= now-p.Per {
			i++
		}
		if i > 0 {
			b.log = slices.Delete(b.log, 0, i)
		}
	case quota.Concurrency:
		b.leases = slices.DeleteFunc(b.leases, func(l lease) bool { return l.expire <= now })
	}
}

func (b *memBucket) count(k int64) int64 {
	for _, w := range b.windows {
		if w.idx == k {
			return w.count
		}
	}
	return 0
}

// add adds n to window k's count, charged at instant at (for n > 0),
// keeping windows sorted and dropping windows whose count falls to zero.
func (b *memBucket) add(k, n, at int64) {
	i, found := slices.BinarySearchFunc(b.windows, k, func(w window, k int64) int { return cmp.Compare(w.idx, k) })
	switch {
	case found:
		b.windows[i].count += n
		if n > 0 {
			b.windows[i].last = max(b.windows[i].last, at)
		}
		if b.windows[i].count <= 0 {
			b.windows = slices.Delete(b.windows, i, i+1)
		}
	case n > 0:
		b.windows = slices.Insert(b.windows, i, window{idx: k, count: n, last: at})
	}
}
