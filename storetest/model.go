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
	log    map[string][]quotamath.LogEntry // SlidingLog: entries in order of instant
	pauses map[string]int64                // end of the pause per scope and pause key
	leases map[string][]lease              // Concurrency: slots held, by lease id
	shared map[string]*tenants             // fair shares (share.go), per bucket
	seq    int64                           // source of reservation ids

	settled map[string][]int64 // costs each reservation was settled to, by id

	// held is, after a refusal of take that another tenant's claim bound,
	// the limits that may be reported as binding it.
	held []int
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
	return v.m.cancel(r)
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

// admits reports whether the limit of b (with its headroom) admits cost
// c at t. A Concurrency limit is decided at now, apart from t (take).
func (m *model) admits(scope string, b quota.Bucket, c, t int64) bool {
	return less(b).Admits(m.counter(bucketID(scope, b)), t, c)
}

// earliest returns the earliest instant, not before t, at which the limit
// of b (with its headroom) admits cost c (c is at most what it can admit).
func (m *model) earliest(scope string, b quota.Bucket, c, t int64) int64 {
	return less(b).Earliest(m.counter(bucketID(scope, b)), t, c)
}

// less is b's limit as a demand with b's headroom sees it.
func less(b quota.Bucket) quotamath.Limit {
	return quotamath.Of(b.Limit).Less(int64(b.Headroom))
}

// charge charges cost c at t to the limit of bucket id and returns the
// mark that cancel needs.
func (m *model) charge(id string, l quota.Limit, c, t int64) int64 {
	q := quotamath.Of(l)
	switch l.Algorithm {
	case quota.GCRA:
		m.tat[id] = q.GCRACharge(m.tat[id], t, c)
		return q.Mark(m.tat[id])
	case quota.FixedWindow, quota.SlidingWindow:
		if m.win[id] == nil {
			m.win[id] = map[int64]int64{}
		}
		k := q.Window(t)
		m.win[id][k] += c
		return k
	case quota.SlidingLog:
		m.log[id] = append(m.log[id], quotamath.LogEntry{At: t, Cost: c})
		return t
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
		m.win[id][mark] -= c
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

// instant returns the earliest instant, not before now, at which every
// limit of d admits it and no listed pause is in force.
func (m *model) instant(d *quota.Demand, now int64) int64 {
	t := now
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
	m.held = nil
	if err := check(d); err != nil {
		return quota.Decision{}, 0, err
	}
	sh := m.shares(d, now)
	t := m.instant(d, now)
	maxWait := max(d.MaxWait, 0)
	if d.Restricted() || slices.ContainsFunc(sh, func(x modelShare) bool { return x.over }) {
		maxWait = 0 // never a reservation
	}
	// Over its share, with other tenants' claims live: refused until they
	// stop holding it back, or until t if that is later.
	end, held := heldBack(sh)
	if held != nil && end >= t {
		m.held = held
		return quota.Decision{Delay: time.Duration(end-now) * time.Microsecond, Limit: held[0]}, end, nil
	}
	delay := time.Duration(t-now) * time.Microsecond
	if held != nil && t > now || t > now && delay > maxWait {
		if held == nil && delay <= max(d.MaxWait, 0) {
			m.claim(sh, t) // refused only because it may not reserve
		}
		dec := quota.Decision{Delay: delay, Limit: -1}
		limits, pauses := m.binding(d, t)
		if len(limits) > 0 {
			dec.Limit = limits[0]
		} else if len(pauses) > 0 {
			dec.Pause = pauses[0]
		}
		return dec, t, nil
	}
	// Concurrency: a slot must be free now; it is taken only when the
	// demand acts now, else claimed when the reservation comes due.
	for i, b := range d.Limits {
		if b.Limit.Algorithm != quota.Concurrency {
			continue
		}
		if exp, full := m.full(bucketID(d.Scope, b), less(b), now, ""); full {
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
		r.Marks[i] = m.charge(bucketID(d.Scope, b), b.Limit, int64(d.CostOf(i)), t)
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
		case quota.FixedWindow:
			end = max(end, (marks[i]+1)*p)
		case quota.SlidingWindow:
			end = max(end, (marks[i]+2)*p)
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
			rem = min(rem, int64(b.Limit.Rate)-h-int64(len(m.live(id, now))))
			continue
		}
		rem = min(rem, max(quotamath.Of(b.Limit).State(m.counter(id), now).Remaining-h, 0))
	}
	return rem, time.Duration(end-now) * time.Microsecond
}

func (m *model) cancel(r *quota.Reservation) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return errors.New("storetest model: not a reservation of this store")
	}
	d := r.Demand
	for i, b := range d.Limits {
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
