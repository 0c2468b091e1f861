package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// model is the suite's reference store: a direct, unoptimised reading of
// the semantics documented on quota.Store and quota.Algorithm, in
// integer microseconds of its clock. The randomized differential test
// compares every decision of the store under test with it, and the suite's
// own tests run every table against it.
//
// Each algorithm's arithmetic is package quotamath's, as in the
// in-process store; the model adds the rest of the semantics (all limits
// or none, pauses, the binding limit, reservations, cancels, leases). The
// Redis store's Lua scripts are a copy of their own, so the differential
// test against Redis still compares two readings of the arithmetic, and
// the hand-computed tables check this one.
//
// Several views (model.view) may share one model, like several instances
// of a service sharing one backend.
type model struct {
	mu     sync.Mutex
	tat    map[string]quotamath.Time       // GCRA: theoretical arrival time per bucket
	win    map[string]map[int64]int64      // FixedWindow, SlidingWindow: count per window index
	last   map[string]map[int64]int64      // FixedWindow, SlidingWindow: latest instant charged per window
	phase  map[string]int64                // Anchored windows: the counter's phase, once it has one
	expiry map[string]int64                // Anchored windows: when the counter's state (phase included) ends
	learn  map[string]bool                 // Anchored windows: the phase is the vendor's (an anchor set it)
	log    map[string][]quotamath.LogEntry // SlidingLog: entries in order of instant
	pauses map[string]int64                // end of the pause per scope and pause key
	leases map[string][]lease              // Concurrency: slots held, by lease id
	shared map[string]*tenants             // fair shares (share.go), per bucket
	seq    int64                           // source of reservation ids

	settled map[string][]int64 // costs each reservation was settled to, by id

	// held is, after a refusal of take that another tenant's claim or a
	// held headroom bound, the limits that may be reported as binding it.
	held []int
	// lent and kept count, after take, its demand's headrooms that the
	// store lent and kept (share.go).
	lent, kept int
}

// lease is one held slot of a Concurrency limit; it is free at and after
// its expiry.
type lease struct {
	id  string
	exp int64
}

func newModel() *model {
	return &model{
		tat:    map[string]quotamath.Time{},
		win:    map[string]map[int64]int64{},
		last:   map[string]map[int64]int64{},
		phase:  map[string]int64{},
		expiry: map[string]int64{},
		learn:  map[string]bool{},
		log:    map[string][]quotamath.LogEntry{},
		pauses: map[string]int64{},
		leases: map[string][]lease{},
		shared: map[string]*tenants{},

		settled: map[string][]int64{},
	}
}

// view is a quota.Store over a model, with its own clock.
type view struct {
	m   *model
	now func() time.Time
}

var _ quota.Store = view{}

func (v view) micros() int64 { return v.now().UnixMicro() }

// Take implements quota.Store.
func (v view) Take(_ context.Context, d *quota.Demand) (quota.Decision, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	dec, _, err := v.m.take(d, v.micros())
	return dec, err
}

// Cancel implements quota.Store.
func (v view) Cancel(_ context.Context, r *quota.Reservation) error {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return v.m.cancel(r, v.micros())
}

// Pause implements quota.Store.
func (v view) Pause(_ context.Context, scope, key string, d time.Duration) error {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	v.m.pause(scope, key, d, v.micros())
	return nil
}

func (m *model) pause(scope, key string, d time.Duration, now int64) {
	if d <= 0 {
		return
	}
	until := now + quotamath.CeilMicros(d)
	k := scope + "\x00" + key
	m.pauses[k] = max(m.pauses[k], until)
}

// bucketID names the counter of b in scope.
func bucketID(scope string, b quota.Bucket) string {
	return scope + "\x00" + b.Limit.Name + "\x00" + b.Key + "\x00" + b.Limit.Algorithm.String()
}

func per(l quota.Limit) int64 { return l.Per.Microseconds() }

func burst(l quota.Limit) int64 { return int64(l.BurstOrRate()) }

// capacity is the largest cost l can ever admit.
func capacity(l quota.Limit) int64 { return int64(l.Capacity()) }

// counter is bucket id's state as package quotamath reads it.
func (m *model) counter(id string) quotamath.Counter {
	w := m.win[id]
	return quotamath.Counter{TAT: m.tat[id], Count: func(k int64) int64 { return w[k] }, Log: m.log[id]}
}

// grid returns l in store units on the windows of bucket id: an Anchored
// limit's phase is the counter's, once it has one.
func (m *model) grid(id string, l quota.Limit) quotamath.Limit {
	q := quotamath.Of(l)
	if phase, ok := m.phase[id]; ok && l.Anchored {
		q = q.WithPhase(phase)
	}
	return q
}

// expire forgets the state of an Anchored window counter whose expiry
// has come: its phase ends with it (quota.Limit.Anchored).
func (m *model) expire(id string, l quota.Limit, now int64) {
	if _, ok := m.phase[id]; ok && l.Anchored && m.expiry[id] <= now {
		delete(m.win, id)
		delete(m.last, id)
		delete(m.phase, id)
		delete(m.expiry, id)
		delete(m.learn, id)
	}
}

// count adds n units (none when n is 0) to window k of bucket id,
// charged at instant at, and keeps the counter's state until window k no
// longer counts.
func (m *model) count(id string, q quotamath.Limit, k, n, at int64) {
	if m.win[id] == nil {
		m.win[id], m.last[id] = map[int64]int64{}, map[int64]int64{}
	}
	if n > 0 {
		m.win[id][k] += n
		if l, ok := m.last[id][k]; !ok || at > l {
			m.last[id][k] = at
		}
	}
	end := q.Start(k + 1)
	if q.Algorithm == quota.SlidingWindow {
		end += q.Per
	}
	m.expiry[id] = max(m.expiry[id], end)
}

// admits reports whether the limit of b (with its headroom) admits cost
// c at t. A Concurrency limit is decided at now, apart from t (take).
func (m *model) admits(scope string, b quota.Bucket, c, t int64) bool {
	l := m.less(scope, b)
	return l.Admits(m.counter(bucketID(scope, b)), t, c)
}

// earliest returns the earliest instant, not before t, at which the limit
// of b (with its headroom) admits cost c (c is at most what it can admit).
func (m *model) earliest(scope string, b quota.Bucket, c, t int64) int64 {
	l := m.less(scope, b)
	return l.Earliest(m.counter(bucketID(scope, b)), t, c)
}

// less is b's limit as a demand with b's headroom sees it, on the
// counter's windows.
func (m *model) less(scope string, b quota.Bucket) quotamath.Limit {
	return m.grid(bucketID(scope, b), b.Limit).Less(int64(b.Headroom)).WithExpiry(b.Expiry)
}

// charge charges cost c at t to the limit of bucket b (of id) and
// returns the mark that cancel needs.
func (m *model) charge(id string, b quota.Bucket, c, t int64) int64 {
	l := b.Limit
	q := quotamath.Of(l)
	switch l.Algorithm {
	case quota.GCRA:
		m.tat[id] = q.GCRACharge(m.tat[id], t, c)
		return q.Mark(m.tat[id])
	case quota.FixedWindow, quota.SlidingWindow:
		if _, ok := m.phase[id]; l.Anchored && !ok {
			m.phase[id] = quotamath.FloorMod(t, q.Per) // the first charge starts the first window
		}
		q = m.grid(id, l)
		k := q.Window(t)
		m.count(id, q, k, c, t)
		if l.Anchored {
			return q.Start(k) // a cancel after the windows moved gives nothing back
		}
		return k
	case quota.SlidingLog:
		qe := q.WithExpiry(b.Expiry)
		at := qe.LogAt(t) // t, or by the bucket's Expiry
		m.log[id] = quotamath.Insert(m.log[id], quotamath.LogEntry{At: at, Cost: c})
		return at
	}
	panic("storetest: unknown algorithm")
}

// refund gives back what charge took, as far as the semantics allow. A
// sliding-log charge is one entry of its instant and cost; entries alike
// in both count alike, so removing any one of them is removing this one.
func (m *model) refund(id string, l quota.Limit, c, mark int64) {
	switch l.Algorithm {
	case quota.GCRA:
		if q := quotamath.Of(l); q.Mark(m.tat[id]) == mark { // no later grant on the bucket
			m.tat[id] = q.GCRARefund(m.tat[id], c)
		}
	case quota.FixedWindow, quota.SlidingWindow:
		if l.Anchored {
			q := m.grid(id, l)
			if _, ok := m.phase[id]; !ok || quotamath.FloorMod(mark-q.Phase, q.Per) != 0 {
				return
			}
			mark = q.Window(mark)
		}
		if n, ok := m.win[id][mark]; ok { // a window no longer kept gives nothing back
			if n > c {
				m.win[id][mark] = n - c
			} else {
				delete(m.win[id], mark)
			}
		}
	case quota.SlidingLog:
		if i := slices.Index(m.log[id], quotamath.LogEntry{At: mark, Cost: c}); i >= 0 {
			m.log[id] = slices.Delete(m.log[id], i, i+1)
		}
	}
}

// check validates d as the stores do: with [quota.Demand.Validate].
func check(d *quota.Demand) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("storetest model: %w", err)
	}
	return nil
}

// instant returns the earliest instant, not before from, at which every
// limit of d admits it and no listed pause is in force.
func (m *model) instant(d *quota.Demand, from int64) int64 {
	t := from
	for _, p := range d.Pauses {
		t = max(t, m.pauses[d.Scope+"\x00"+p])
	}
	for changed := true; changed; {
		changed = false
		for i, b := range d.Limits {
			if e := m.earliest(d.Scope, b, int64(d.CostOf(i)), t); e > t {
				t, changed = e, true
			}
		}
	}
	return t
}

// binding returns what may be reported as binding a demand refused until
// t: the limits that do not admit it at t-1µs and the pauses in force then.
func (m *model) binding(d *quota.Demand, t int64) (limits []int, pauses []string) {
	for i, b := range d.Limits {
		if !m.admits(d.Scope, b, int64(d.CostOf(i)), t-1) {
			limits = append(limits, i)
		}
	}
	for _, p := range d.Pauses {
		if m.pauses[d.Scope+"\x00"+p] > t-1 {
			pauses = append(pauses, p)
		}
	}
	return limits, pauses
}

// take decides d at now and returns the decision and its instant: for a
// refusal, the instant a retry may succeed.
func (m *model) take(d *quota.Demand, now int64) (quota.Decision, int64, error) {
	m.held, m.lent, m.kept = nil, 0, 0
	if err := check(d); err != nil {
		return quota.Decision{}, 0, err
	}
	for _, b := range d.Limits {
		m.expire(bucketID(d.Scope, b), b.Limit, now)
	}
	sh, seen := m.shares(d, now)
	t := m.instant(seen, now)
	maxWait := max(d.MaxWait, 0)
	if d.Restricted() {
		// A reservation at most T/2 ahead (rounded up), the least over
		// the limits other than Concurrency.
		least := time.Duration(-1)
		for _, b := range d.Limits {
			if t := time.Duration((spanUp(b.Limit, 1)+1)/2) * time.Microsecond; b.Limit.Algorithm != quota.Concurrency && (least < 0 || t < least) {
				least = t
			}
		}
		maxWait = min(maxWait, max(least, 0))
	}
	delay := time.Duration(t-now) * time.Microsecond
	if end, held := heldBack(sh); held != nil || delay > maxWait {
		// Refused until t, or until a held headroom may be lent if that
		// is sooner (not before the pauses end); held back by other
		// tenants' claims, not before they lapse.
		until := t
		lend, lenders := lendAt(sh)
		if lend >= 0 {
			start := now
			for _, p := range d.Pauses {
				start = max(start, m.pauses[d.Scope+"\x00"+p])
			}
			until = min(t, max(lend, start))
		}
		dec := quota.Decision{Limit: -1}
		if held != nil && end >= until {
			// and if the limits do not admit it then, until they do after
			// it (a sliding log may admit it now and not then).
			until, dec.Limit, m.held = m.instant(seen, end), held[0], held
		} else if until < t {
			dec.Limit, m.held = lenders[0], lenders // until the headroom may be lent
		} else if limits, pauses := m.binding(seen, until); len(limits) > 0 {
			dec.Limit = limits[0]
		} else if len(pauses) > 0 {
			dec.Pause = pauses[0]
		}
		dec.Delay = time.Duration(until-now) * time.Microsecond
		if dec.Delay <= d.MaxWait {
			m.claim(sh, until) // it will come back then
		}
		return dec, until, nil
	}
	// Concurrency: a slot must be free now; it is taken only when the
	// demand acts now, else claimed when the reservation comes due.
	for i, b := range d.Limits {
		if b.Limit.Algorithm != quota.Concurrency {
			continue
		}
		if exp, full := m.full(bucketID(d.Scope, b), m.less(d.Scope, b), now, ""); full {
			return quota.Decision{Delay: time.Duration(max(t, exp)-now) * time.Microsecond, Limit: i}, t, nil
		}
	}
	m.seq++
	dd := *d
	dd.Limits = slices.Clone(d.Limits)
	dd.Pauses = slices.Clone(d.Pauses)
	r := &quota.Reservation{Demand: &dd, ID: strconv.FormatInt(m.seq, 10), Marks: make([]int64, len(d.Limits))}
	for i, b := range d.Limits {
		if b.Limit.Algorithm == quota.Concurrency {
			if t > now {
				r.Unclaimed = true
			} else {
				r.Marks[i] = m.hold(bucketID(d.Scope, b), b.Limit, now, r.ID)
			}
			continue
		}
		r.Marks[i] = m.charge(bucketID(d.Scope, b), b, int64(d.CostOf(i)), t)
	}
	m.charged(sh, t)
	dec := quota.Decision{OK: true, Delay: delay, Limit: -1, Reservation: r}
	dec.Remaining, dec.ResetAfter = m.left(d, r.Marks, now, t)
	return dec, t, nil
}

// left returns Remaining and ResetAfter of a demand granted for t at now
// with marks, as quota.Decision defines them: the charges' ends are
// written out here, apart from package quotamath, so that the
// differential tests check its ChargeEnd.
func (m *model) left(d *quota.Demand, marks []int64, now, t int64) (int64, time.Duration) {
	end := now
	for i, b := range d.Limits {
		p := per(b.Limit)
		switch b.Limit.Algorithm {
		case quota.GCRA: // the arrival time in ns, up to the µs
			end = max(end, (marks[i]+999)/1000)
		case quota.FixedWindow, quota.SlidingWindow:
			start := marks[i] // an Anchored limit's mark is its window's start
			if !b.Limit.Anchored {
				start = marks[i]*p + b.Limit.Phase.Microseconds()%p
			}
			e := start + p
			if b.Limit.Algorithm == quota.SlidingWindow {
				e += p // the next window weighs it as its previous
			}
			end = max(end, e)
		case quota.SlidingLog:
			end = max(end, marks[i]+p)
		}
	}
	if t > now || len(d.Limits) == 0 {
		return 0, time.Duration(end-now) * time.Microsecond
	}
	rem := int64(math.MaxInt64)
	for _, b := range d.Limits {
		id := bucketID(d.Scope, b)
		h := int64(b.Headroom)
		if b.Limit.Algorithm == quota.Concurrency {
			if d.SlotsOnly() {
				rem = min(rem, int64(b.Limit.Rate)-h-int64(len(m.live(id, now))))
			}
			continue
		}
		l := m.grid(id, b.Limit)
		rem = min(rem, max(l.State(m.counter(id), now).Remaining-h, 0))
	}
	return rem, time.Duration(end-now) * time.Microsecond
}

func (m *model) cancel(r *quota.Reservation, now int64) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return errors.New("storetest model: not a reservation of this store")
	}
	d := r.Demand
	for i, b := range d.Limits {
		m.expire(bucketID(d.Scope, b), b.Limit, now)
		if b.Limit.Algorithm == quota.Concurrency {
			m.drop(bucketID(d.Scope, b), r.ID)
			continue
		}
		m.refund(bucketID(d.Scope, b), b.Limit, int64(d.CostOf(i)), r.Marks[i])
	}
	return nil
}

// The model's Concurrency limits: a view is a quota.LeaseStore.

var _ quota.LeaseStore = view{}

// live returns the leases of bucket id whose expiry is after now.
func (m *model) live(id string, now int64) []lease {
	m.leases[id] = slices.DeleteFunc(m.leases[id], func(l lease) bool { return l.exp <= now })
	return m.leases[id]
}

// full reports whether bucket id has no free slot now for lease id
// leaseID (a live lease of its own needs none), and if so the instant at
// which expiries alone free one.
func (m *model) full(id string, l quotamath.Limit, now int64, leaseID string) (int64, bool) {
	held := m.live(id, now)
	if leaseID != "" && slices.ContainsFunc(held, func(x lease) bool { return x.id == leaseID }) {
		return 0, false
	}
	exp := make([]int64, len(held))
	for i, x := range held {
		exp[i] = x.exp
	}
	return l.SlotFreeAt(exp)
}

// hold gives lease leaseID of bucket id the expiry now+Per, or keeps a
// later one it has, and returns it.
func (m *model) hold(id string, l quota.Limit, now int64, leaseID string) int64 {
	exp := now + per(l)
	for i, x := range m.leases[id] {
		if x.id == leaseID {
			m.leases[id][i].exp = max(x.exp, exp)
			return m.leases[id][i].exp
		}
	}
	m.leases[id] = append(m.leases[id], lease{id: leaseID, exp: exp})
	return exp
}

// drop removes lease leaseID from bucket id.
func (m *model) drop(id, leaseID string) {
	m.leases[id] = slices.DeleteFunc(m.leases[id], func(x lease) bool { return x.id == leaseID })
}

// Claim implements quota.LeaseStore.
func (v view) Claim(_ context.Context, r *quota.Reservation) (quota.Decision, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return quota.Decision{}, errors.New("storetest model: not a reservation of this store")
	}
	if !r.Unclaimed {
		return quota.Decision{OK: true, Limit: -1, Reservation: r}, nil
	}
	now, d := v.micros(), r.Demand
	for i, b := range d.Limits {
		if b.Limit.Algorithm != quota.Concurrency {
			continue
		}
		if exp, full := v.m.full(bucketID(d.Scope, b), quotamath.Of(b.Limit), now, r.ID); full {
			return quota.Decision{Delay: time.Duration(exp-now) * time.Microsecond, Limit: i}, nil
		}
	}
	c := &quota.Reservation{Demand: d, ID: r.ID, Marks: slices.Clone(r.Marks)}
	for i, b := range d.Limits {
		if b.Limit.Algorithm == quota.Concurrency {
			c.Marks[i] = v.m.hold(bucketID(d.Scope, b), b.Limit, now, r.ID)
		}
	}
	return quota.Decision{OK: true, Limit: -1, Reservation: c}, nil
}

// Release implements quota.LeaseStore.
func (v view) Release(_ context.Context, r *quota.Reservation) error {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	if r == nil || r.Demand == nil {
		return errors.New("storetest model: not a reservation of this store")
	}
	for _, b := range r.Demand.Limits {
		if b.Limit.Algorithm == quota.Concurrency {
			v.m.drop(bucketID(r.Demand.Scope, b), r.ID)
		}
	}
	return nil
}

// Renew implements quota.LeaseStore.
func (v view) Renew(_ context.Context, r *quota.Reservation) error {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	if r == nil || r.Demand == nil {
		return errors.New("storetest model: not a reservation of this store")
	}
	now := v.micros()
	var lost error
	for _, b := range r.Demand.Limits {
		if b.Limit.Algorithm != quota.Concurrency {
			continue
		}
		id := bucketID(r.Demand.Scope, b)
		if slices.ContainsFunc(v.m.live(id, now), func(x lease) bool { return x.id == r.ID }) {
			v.m.hold(id, b.Limit, now, r.ID)
		} else if lost == nil {
			lost = fmt.Errorf("storetest model: renew: limit %s: %w", b.Limit.Name, quota.ErrLeaseLost)
		}
	}
	return lost
}

// WatchRelease implements quota.LeaseStore; the model sends no
// wake-ups.
func (v view) WatchRelease(context.Context, string, quota.Bucket) (<-chan struct{}, func(), error) {
	return nil, func() {}, nil
}

// The model's Sync and Anchor: a view is a quota.Syncer and a
// quota.Anchorer.

var (
	_ quota.Syncer   = view{}
	_ quota.Anchorer = view{}
)

// Sync implements quota.Syncer.
func (v view) Sync(_ context.Context, scope string, b quota.Bucket, remaining int, within time.Duration) error {
	if err := b.Limit.Validate(); err != nil {
		return fmt.Errorf("storetest model: sync: %w", err)
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	v.m.sync(scope, b, int64(max(remaining, 0)), within, v.micros())
	return nil
}

func (m *model) sync(scope string, b quota.Bucket, left int64, within time.Duration, now int64) {
	l, id := b.Limit, bucketID(scope, b)
	if within <= 0 || l.Algorithm == quota.Concurrency || left >= capacity(l) {
		return
	}
	m.expire(id, l, now)
	w := quotamath.CeilMicros(within)
	q := m.grid(id, l)
	switch l.Algorithm {
	case quota.GCRA:
		if tat := q.GCRASync(now, w, left); m.tat[id].Before(tat) {
			m.tat[id] = tat
		}
	case quota.SlidingLog:
		if fill := q.Rate - left - quotamath.LogCost(m.log[id], now-q.Per, now); fill > 0 {
			m.log[id] = quotamath.Insert(m.log[id], quotamath.LogEntry{At: now, Cost: fill})
		}
	default:
		if _, ok := m.phase[id]; l.Anchored && !ok {
			m.phase[id] = quotamath.FloorMod(now, q.Per) // as a first charge would
			q = m.grid(id, l)
		}
		first, last := q.SyncWindows(now, w)
		for k := first; k <= last; k++ {
			target, at := q.Rate, max(now, q.Start(k))
			if k == last {
				target = q.Rate - left
			}
			m.count(id, q, k, max(target-m.win[id][k], 0), at)
		}
	}
}

// Anchor implements quota.Anchorer.
func (v view) Anchor(_ context.Context, scope string, b quota.Bucket, within, tolerance time.Duration) (time.Duration, bool, error) {
	if err := b.Limit.Validate(); err != nil {
		return 0, false, fmt.Errorf("storetest model: anchor: %w", err)
	}
	if !b.Limit.Anchored {
		return 0, false, fmt.Errorf("storetest model: anchor: %w: limit %s is not Anchored", quota.ErrInvalid, b.Limit.Name)
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	ends, moved := v.m.anchor(scope, b, within, tolerance, v.micros())
	return time.Duration(ends) * us, moved, nil
}

func (m *model) anchor(scope string, b quota.Bucket, within, tolerance time.Duration, now int64) (ends int64, moved bool) {
	l, id := b.Limit, bucketID(scope, b)
	m.expire(id, l, now)
	q := m.grid(id, l)
	_, phased := m.phase[id]
	if within <= 0 {
		if !phased {
			return 0, false
		}
		return q.Ends(now), m.learn[id]
	}
	end := now + quotamath.CeilMicros(within)
	if m.learn[id] && !q.AnchorMoves(end, max(tolerance, 0).Microseconds()) {
		return q.Ends(now), false
	}
	var ws []quotamath.WindowCount
	for k, n := range m.win[id] {
		if n > 0 {
			ws = append(ws, quotamath.WindowCount{K: k, Count: n, Last: m.last[id][k]})
		}
	}
	slices.SortFunc(ws, func(a, b quotamath.WindowCount) int { return int(a.K - b.K) })
	phase := quotamath.FloorMod(end, q.Per)
	windows := q.Reanchor(ws, phase, now)
	delete(m.win, id)
	delete(m.last, id)
	m.phase[id], m.learn[id] = phase, true
	q = m.grid(id, l)
	m.count(id, q, q.Window(now), 0, now)
	for _, w := range windows {
		m.count(id, q, w.K, w.Count, w.Last)
	}
	return q.Ends(now), true
}
