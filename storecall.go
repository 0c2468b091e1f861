package throttle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
)

// localMark is the Reservation.ID of a reservation made by the local
// fallback store, so that Cancel goes back to it. The in-process store
// does not use IDs otherwise.
const localMark = "throttle:local-fallback"

// storeCallTimeout bounds store calls made after the caller's part is
// done, on a context of their own that the caller's ending does not
// cancel: learning (a pause, a sync, an anchor), a settlement, giving
// back a reservation, renewing or freeing in-flight slots.
const storeCallTimeout = time.Second

// failover is the part of a Transport that deals with a failing store: the
// breaker in front of it and the local store that stands in for it. It is
// set up on first use.
type failover struct {
	settings Breaker
	once     sync.Once
	breaker  *breaker
	local    *memstore.Store
	clock    storeClock // what the store's answers say of its clock (late.go)
	seeds    seeds      // what they say of its counters, for local shares (localseed.go)
}

// failover returns the transport's failover state, set up on first use.
func (lim *Limiter) failover() *failover {
	f := &lim.failure
	f.once.Do(func() {
		f.breaker = newBreaker(f.settings, lim.now, lim.reportStore)
		f.local = memstore.New(memstore.WithClock(lim.now))
	})
	return f
}

// inProcess reports whether the transport's store is the in-process one,
// which cannot be unavailable; its calls skip the breaker.
func (lim *Limiter) inProcess() bool {
	_, ok := lim.store.(*memstore.Store)
	return ok
}

// take asks the store to decide d, the demand of a request under rule r,
// through the breaker, and applies r's failure mode when the store cannot
// answer. Errors it returns are ready for the caller.
func (lim *Limiter) take(ctx context.Context, r *rule, d *demand, ev *DecisionEvent) (quota.Decision, error) {
	if d.place != nil {
		// queue.go: the place may hold a reservation taken over from
		// another waiter, and records one the store grants for later;
		// the call is made with the request's context, which a drop
		// from the queue does not end.
		p := d.place
		return p.take(lim.now, func() (quota.Decision, error) { return lim.takeStore(p.ctx, r, d, ev) })
	}
	return lim.takeStore(ctx, r, d, ev)
}

// takeStore is take without the queue.
func (lim *Limiter) takeStore(ctx context.Context, r *rule, d *demand, ev *DecisionEvent) (quota.Decision, error) {
	ev.Tries++
	ev.Fallback = FailDefault                // this decision's, not an earlier try's
	d.due, d.ends = time.Time{}, time.Time{} // this decision's (late.go)
	if lim.hooks.OnDecision != nil {
		start := time.Now()
		defer func() { ev.StoreTime += time.Since(start) }()
	}
	if lim.inProcess() {
		dec, err := lim.store.Take(ctx, &d.Demand)
		if err != nil {
			ev.StoreErr = err
			return dec, fmt.Errorf("throttle: rule %s: store: %w", r.id, err)
		}
		return dec, nil
	}
	f := lim.failover()
	// The store reads a snapshot of d: a call the breaker stopped waiting
	// for may still run while the request goes on and changes d (its
	// MaxWait, when it waits for a slot).
	job := &takeJob{giveBack: giveBack{lim: lim, ctx: ctx}, d: d.Demand}
	asked := lim.now()
	err := f.breaker.call(ctx, job)
	if err == nil {
		dec, answered := job.dec, lim.now()
		noteGrant(f, d, dec, asked, answered)
		if r.failMode == FailLocal {
			f.seeds.note(d, dec, answered)
		}
		return dec, nil
	}
	ev.StoreErr = err
	if !storeFault(ctx, err) {
		return quota.Decision{}, fmt.Errorf("throttle: rule %s: store: %w", r.id, err)
	}
	ev.Fallback = r.failMode
	switch r.failMode {
	case FailOpen:
		return quota.Decision{OK: true, Limit: -1}, nil
	case FailClosed:
		return quota.Decision{}, fmt.Errorf("throttle: rule %s: %w: %w", r.id, ErrStoreUnavailable, err)
	}
	ld := d.Demand
	ld.Limits = make([]quota.Bucket, len(d.Limits))
	for i, b := range d.Limits {
		l := r.local[d.ruleLimit(i)]
		ld.Limits[i] = d.class.bucket(l)
		ld.Limits[i].Key, ld.Limits[i].Cost, ld.Limits[i].Tenant = b.Key, b.Cost, b.Tenant
	}
	f.seeds.seed(ctx, f.local, &ld, r.instances, lim.now())
	// Not dec: an abandoned store call may still write it.
	ldec, lerr := f.local.Take(ctx, &ld)
	if lerr != nil {
		return quota.Decision{}, fmt.Errorf("throttle: rule %s: %w: local fallback: %w (store: %w)", r.id, ErrStoreUnavailable, lerr, err)
	}
	if ldec.Reservation != nil {
		// The mark, then the local store's own id (a Concurrency lease's).
		ldec.Reservation.ID = localMark + ldec.Reservation.ID
	}
	return ldec, nil // a failure mode's grant: never late (d.due stays zero)
}

// noteGrant records, for [Limiter.lateGrant], what dec, a decision by a
// call made from asked to answered, says of the store's clock (in f), and
// in d the instants of its grant: the earliest it may be charged for
// locally, the store's clock at its charge, and the earliest its fixed
// windows may end.
func noteGrant(f *failover, d *demand, dec quota.Decision, asked, answered time.Time) {
	if !dec.OK {
		return
	}
	f.clock.observe(asked, answered, dec.At)
	at := dec.At
	if at.IsZero() {
		at = asked // a store that does not say its clock (storeClock.observe)
	}
	d.due, d.ends = asked.Add(dec.Delay), grantWindowEnd(&d.Demand, dec, asked)
	d.charge = grantClock{at: at.Add(dec.Delay), reply: answered.Sub(at)}
}

// retime asks the store to move r, d's grant, to the instant of the call
// ([quota.Retimer]) through the breaker, and notes the retimed grant in d
// for [Limiter.lateGrant], as takeStore notes a grant. It reports false
// when the store cannot retime (no Retimer, a failure mode's local grant,
// an error, or no room at the new instant): the caller then gives r back.
// A call the breaker stopped waiting for gives back what it retimed.
func (lim *Limiter) retime(ctx context.Context, d *demand, r *quota.Reservation) (quota.Decision, bool) {
	rt, ok := lim.store.(quota.Retimer)
	if !ok || r == nil {
		return quota.Decision{}, false
	}
	if _, local := localReservation(r); local {
		return quota.Decision{}, false
	}
	f := lim.failover()
	asked := lim.now()
	job := &retimeJob{giveBack: giveBack{lim: lim, ctx: ctx}, rt: rt, r: r}
	if err := f.breaker.call(ctx, job); err != nil { // not job.dec: an abandoned call may still write it
		return quota.Decision{}, false
	}
	dec := job.dec
	if !dec.OK {
		return dec, false // the refusal, for its Limit (lateHold)
	}
	noteGrant(f, d, dec, asked, lim.now())
	return dec, true
}

// storeFault reports whether err, from a store call made with ctx, means
// the store could not answer, as opposed to the caller's context ending or
// a demand no store can grant, or a lease that expired (an answer).
func storeFault(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, ErrCostTooHigh) && !errors.Is(err, ErrInvalidPolicy) && !errors.Is(err, quota.ErrLeaseLost)
}

// giveBack is the undo of a store call that grants: a grant made after
// the request moved on without it is given back, so an abandoned call
// costs the fleet no quota.
type giveBack struct {
	lim *Limiter
	ctx context.Context // the request's
	dec quota.Decision  // the call's
}

func (g *giveBack) undo() {
	if g.dec.OK && g.dec.Reservation != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(g.ctx), storeCallTimeout)
		defer cancel()
		_ = g.lim.store.Cancel(cctx, g.dec.Reservation)
	}
}

// takeJob is a store's Take of d, through the breaker.
type takeJob struct {
	giveBack
	d quota.Demand
}

func (j *takeJob) do(ctx context.Context) (err error) {
	j.dec, err = j.lim.store.Take(ctx, &j.d)
	return err
}

// retimeJob is a store's Retime of r, through the breaker.
type retimeJob struct {
	giveBack
	rt quota.Retimer
	r  *quota.Reservation
}

func (j *retimeJob) do(ctx context.Context) (err error) {
	j.dec, err = j.rt.Retime(ctx, j.r)
	return err
}

// cancel gives r back to the store that granted it: the local fallback
// store, or the shared store through the breaker.
func (lim *Limiter) cancel(ctx context.Context, r *quota.Reservation) error {
	if lr, ok := localReservation(r); ok { // lease.go
		return lim.failover().local.Cancel(ctx, lr)
	}
	return lim.guard(ctx, func(ctx context.Context) error { return lim.store.Cancel(ctx, r) })
}

// pause records a pause in the store, through the breaker. The learner's
// local copy holds whether or not it succeeds.
func (lim *Limiter) pause(ctx context.Context, scope, key string, d time.Duration) error {
	return lim.guard(ctx, func(ctx context.Context) error { return lim.store.Pause(ctx, scope, key, d) })
}

// guard runs call, a store call made with ctx other than Take, through the
// breaker: it is not made while the breaker is open, and its outcome
// counts like a Take's.
func (lim *Limiter) guard(ctx context.Context, call func(context.Context) error) error {
	if lim.inProcess() {
		return call(ctx)
	}
	return lim.failover().breaker.call(ctx, jobFunc(call))
}

// guardValue is guard for a call that returns a value. The value is
// returned only when the caller waited for the call: a call the breaker
// abandons runs on, on its own goroutine, and what it returns then is
// dropped (a closure writing the caller's variables would race with the
// caller reading them).
func guardValue[T any](ctx context.Context, lim *Limiter, call func(context.Context) (T, error)) (T, error) {
	if lim.inProcess() {
		return call(ctx)
	}
	j := &valueJob[T]{call: call}
	if err := lim.failover().breaker.call(ctx, j); err != nil {
		var zero T
		return zero, err
	}
	return j.v, nil // written before the call's goroutine handed its error over
}

// valueJob is a storeJob that keeps its call's value, with nothing to take
// back.
type valueJob[T any] struct {
	call func(context.Context) (T, error)
	v    T
}

func (j *valueJob[T]) do(ctx context.Context) error {
	v, err := j.call(ctx)
	j.v = v
	return err
}

func (*valueJob[T]) undo() {}

// localReservation returns, for a reservation of the local fallback
// store (see [FailLocal]), a copy carrying the local store's own id.
func localReservation(r *quota.Reservation) (*quota.Reservation, bool) {
	id, ok := strings.CutPrefix(r.ID, localMark)
	if !ok {
		return nil, false
	}
	lr := *r
	lr.ID = id
	return &lr, true
}

// leaseCalls routes the lease calls of r to the store that granted it: the
// local fallback store, or the shared one through the breaker.
type leaseCalls struct {
	lim   *Limiter
	local *memstore.Store // nil: the shared store
	ls    quota.LeaseStore
	r     *quota.Reservation
}

func (lim *Limiter) leaseCalls(r *quota.Reservation) (leaseCalls, bool) {
	if lr, ok := localReservation(r); ok {
		return leaseCalls{lim: lim, local: lim.failover().local, r: lr}, true
	}
	ls, ok := lim.store.(quota.LeaseStore)
	return leaseCalls{lim: lim, ls: ls, r: r}, ok
}

// claim takes the slots of c.r, an unclaimed reservation. A claim that
// the breaker abandoned (see [Breaker].CallTimeout) and that succeeds
// after all is released at once: its request has moved on.
func (c leaseCalls) claim(ctx context.Context) (quota.Decision, error) {
	if c.local != nil {
		dec, err := c.local.Claim(ctx, c.r)
		if dec.Reservation != nil {
			lr := *dec.Reservation
			lr.ID = localMark + lr.ID
			dec.Reservation = &lr
		}
		return dec, err
	}
	if c.lim.inProcess() {
		return c.ls.Claim(ctx, c.r)
	}
	job := &claimJob{ls: c.ls, r: c.r}
	if err := c.lim.failover().breaker.call(ctx, job); err != nil {
		return quota.Decision{}, err
	}
	return job.dec, nil
}

// claimJob is a LeaseStore's Claim of r, through the breaker. Its undo
// releases the slots of a claim made after its request moved on.
type claimJob struct {
	ls  quota.LeaseStore
	r   *quota.Reservation
	dec quota.Decision
}

func (j *claimJob) do(ctx context.Context) (err error) {
	j.dec, err = j.ls.Claim(ctx, j.r)
	return err
}

func (j *claimJob) undo() {
	if j.dec.OK && j.dec.Reservation != nil {
		cctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
		defer cancel()
		_ = j.ls.Release(cctx, j.dec.Reservation)
	}
}

// release frees the slots of c.r. It goes to the store directly, not
// through the breaker: a release decides nothing, and a store may answer
// it at once without a round trip (redisstore queues releases to ride on
// later calls), which must not count as the store answering.
func (c leaseCalls) release(ctx context.Context) error {
	if c.local != nil {
		return c.local.Release(ctx, c.r)
	}
	return c.ls.Release(ctx, c.r)
}

func (c leaseCalls) renew(ctx context.Context) error {
	if c.local != nil {
		return c.local.Renew(ctx, c.r)
	}
	return c.lim.guard(ctx, func(ctx context.Context) error { return c.ls.Renew(ctx, c.r) })
}
