package throttle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotakit/throttle/quota"
)

// This file holds the bound on a rule's waiting requests ([Rule.MaxQueue]):
// a request that may wait takes a place in its rule's queue before it is
// decided and leaves it when it goes or fails. When no place is left it is
// decided as if it could not wait; a refusal then either stands
// (RefuseNew) or takes the oldest waiter's place (DropOldest).
//
// The queue also keeps the reservations its places wait for, so that no
// quota is lost when a waiter goes without acting:
//
//   - a newcomer that drops the oldest waiter takes over its reservation
//     when their demands are the same (same scope, counters, costs,
//     pauses): no store call, and the newcomer goes in the dropped slot.
//     Otherwise, or when the dropped waiter holds no reservation yet (it
//     is still being decided), the newcomer waits until the dropped
//     waiter has given its quota back, or has passed it on, and only then
//     asks the store;
//   - a waiter that leaves with a reservation (its context ended, or it
//     was dropped by a different demand) shifts it down the line: the next
//     waiter of the same demand takes it, that one's goes to the next, and
//     the latest reservation of the line is the one given back to the
//     store. The latest is the one a store can always refund: a GCRA
//     charge is returned only if no later one sits on it ([quota.Reservation]).
//
// A give-back holds order exclusively and every store Take of a placed
// request holds it shared, and a reservation is recorded in its place
// before the Take lets go: so no Take of the queue lands between the
// choice of the latest reservation and its refund. With these, the
// reservations a queue holds on a counter never outnumber its places, and
// a counter's reservations reach at most MaxQueue emission intervals
// ahead per instance.

// ErrQueueFull is wrapped by the [*LimitError] of a request refused
// because [Rule.MaxQueue] requests of its rule already waited in the
// Transport and the rule's QueueFull is [RefuseNew].
var ErrQueueFull = errors.New("throttle: too many requests waiting")

// ErrQueueDropped is wrapped by the [*LimitError] of a waiting request that
// made room for a newer one: its rule's queue was full and its QueueFull is
// [DropOldest].
var ErrQueueDropped = errors.New("throttle: dropped from the waiting queue for a newer request")

// A QueueFull says what a rule does with a request that may wait while
// [Rule.MaxQueue] requests of the rule already wait in the Transport.
type QueueFull int

const (
	// RefuseNew refuses the newcomer at once unless its quota is there now
	// (a [*LimitError] wrapping [ErrQueueFull]; Bottleneck's "OVERFLOW").
	RefuseNew QueueFull = iota
	// DropOldest makes the longest waiter fail ([ErrQueueDropped]) and the
	// newcomer wait in its place (Bottleneck's "LEAK"). No quota is lost:
	// when the two ask the same of the store (same scope, counters, costs
	// and pauses), the newcomer takes over the dropped waiter's reservation
	// without a store call, and goes at the instant the dropped waiter
	// would have; otherwise the dropped waiter's reservation passes to a
	// later waiter of its own demand, the latest of those is given back,
	// and only then is the newcomer decided. So the queue never holds more
	// reservations than places, and the reservations of a counter reach at
	// most MaxQueue emission intervals ahead of now (per instance: each
	// Transport or Limiter has its own queue).
	DropOldest
)

// String returns the QueueFull's name as policy files spell it.
func (q QueueFull) String() string {
	switch q {
	case RefuseNew:
		return "refuse-new"
	case DropOldest:
		return "drop-oldest"
	}
	return fmt.Sprintf("QueueFull(%d)", int(q))
}

func (q QueueFull) valid() bool { return q == RefuseNew || q == DropOldest }

// waitQueue is the places of one rule's requests that may wait. Safe for
// concurrent use.
type waitQueue struct {
	max  int
	full QueueFull

	// order is held shared by every store Take of a placed request and
	// exclusively by a give-back (see the top of this file). It is never
	// acquired while mu is held.
	order sync.RWMutex

	mu      sync.Mutex
	waiting []*queued // oldest first
}

// queued is one request's place. Its fields other than q, key, drop and
// moved are guarded by q.mu.
type queued struct {
	q     *waitQueue
	ctx   context.Context // the request's, which a drop does not end: for its store calls
	key   string          // the demand (demandKey): places with equal keys may swap reservations
	drop  context.CancelCauseFunc
	moved chan struct{} // (buffered) res was swapped for an earlier one while it waited

	res     *quota.Reservation // the reservation the request waits for; nil: none
	due     time.Time          // when res comes due, on the Limiter's clock
	dropped bool               // a newcomer took the place: it must not act

	heir  *queued       // the newcomer that took this place before it held a reservation
	from  *queued       // for a heir: the place it took, until that one is resolved
	ready chan struct{} // for a heir: closed when from is resolved
}

// enter takes a place for a request whose context is ctx and whose
// demand's key is key, taking the oldest waiter's when evict is set and
// none is free. It returns the context to wait with (cancelled with cause
// ErrQueueDropped when the place is taken from it) and the place, or a
// nil place when none was free; a request without one must not wait.
// The place must be left with leave.
func (q *waitQueue) enter(ctx context.Context, key string, evict bool) (context.Context, *queued) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) >= q.max && !evict {
		return ctx, nil
	}
	wctx, cancel := context.WithCancelCause(ctx)
	p := &queued{q: q, ctx: ctx, key: key, drop: cancel, moved: make(chan struct{}, 1)}
	if len(q.waiting) >= q.max {
		old := q.waiting[0]
		q.waiting = q.waiting[1:]
		old.dropped = true
		old.drop(ErrQueueDropped)
		switch {
		case old.res != nil && old.key == key:
			// The same demand: the newcomer goes in the dropped slot.
			p.res, p.due, old.res = old.res, old.due, nil
		case old.from != nil:
			// It was itself waiting for a place it took: the newcomer
			// waits for that one instead.
			p.from, p.ready = old.from, old.ready
			old.from.heir, old.from = p, nil
		default:
			// Still being decided, or a different demand: the newcomer
			// asks the store once the dropped waiter's quota is settled.
			p.from, p.ready = old, make(chan struct{})
			old.heir = p
		}
	}
	q.waiting = append(q.waiting, p)
	return wctx, p
}

// await waits, for a place entered as a heir, until the place it took is
// resolved: it then holds that place's reservation, or none and asks the
// store itself.
func (p *queued) await(ctx context.Context) error {
	if p.ready == nil {
		return nil
	}
	select {
	case <-p.ready:
		return ctx.Err() // nil, unless a newcomer took the place meanwhile
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave removes p from its queue (call it once, when the request goes or
// fails). A reservation p still holds goes to its heir, or down the line
// of its demand, the latest of which is given back with cancel; then p's
// heir, if any, may ask the store.
func (p *queued) leave(cancel func(*quota.Reservation)) {
	q := p.q
	ordered := false // q.order held: a give-back needs it
	var res *quota.Reservation
	var heir *queued
	for {
		q.mu.Lock()
		if p.from != nil {
			if p.from.heir == p {
				p.from.heir = nil
			}
			p.from = nil
		}
		if p.res != nil && (p.heir == nil || p.heir.key != p.key) && !ordered {
			// p stays in line meanwhile: another give-back must count
			// its reservation among the later ones.
			q.mu.Unlock()
			q.order.Lock()
			ordered = true
			continue
		}
		if i := slices.Index(q.waiting, p); i >= 0 {
			q.waiting = slices.Delete(q.waiting, i, i+1)
		}
		res, heir = p.res, p.heir
		p.res, p.heir = nil, nil
		if res != nil && heir != nil && heir.key == p.key {
			heir.res, heir.due, res = res, p.due, nil
		}
		if res != nil {
			res = q.shiftLocked(p.key, res, p.due)
		}
		q.mu.Unlock()
		break
	}
	p.drop(nil)
	if res != nil {
		cancel(res)
	}
	if ordered {
		q.order.Unlock()
	}
	if heir != nil {
		q.mu.Lock()
		if p.heir != nil {
			// heir was dropped meanwhile and its newcomer waits for p
			// instead (enter), on the same channel.
			heir, p.heir = p.heir, nil
		}
		heir.from = nil
		close(heir.ready)
		q.mu.Unlock()
	}
}

// shiftLocked passes res, a reservation of demand key due at due that its
// holder will not use, down the line: each waiter of key holding a later
// reservation takes the one before it. It returns the latest, to give
// back. q.mu is held.
func (q *waitQueue) shiftLocked(key string, res *quota.Reservation, due time.Time) *quota.Reservation {
	var line []*queued
	for _, w := range q.waiting {
		if w.key == key && w.res != nil && later(w.res, w.due, res, due) {
			line = append(line, w)
		}
	}
	slices.SortFunc(line, func(a, b *queued) int {
		switch {
		case later(a.res, a.due, b.res, b.due):
			return 1
		case later(b.res, b.due, a.res, a.due):
			return -1
		}
		return 0
	})
	for _, w := range line {
		w.res, res = res, w.res
		w.due, due = due, w.due
		select {
		case w.moved <- struct{}{}:
		default:
		}
	}
	return res
}

// later reports whether reservation a (due at da) was charged after b (due
// at db), both of one demand: by the store's marks, limit by limit (GCRA
// arrival times, windows, log instants all grow with the instant
// charged), and by their due instants when the marks agree.
func later(a *quota.Reservation, da time.Time, b *quota.Reservation, db time.Time) bool {
	if len(a.Marks) == len(b.Marks) {
		for i := range a.Marks {
			if a.Marks[i] != b.Marks[i] {
				return a.Marks[i] > b.Marks[i]
			}
		}
	}
	return da.After(db)
}

// take decides the demand of p's request with call, a store Take made
// with p.ctx: a drop must not abandon a call whose grant it would then
// not see, since the dropped waiter passes its grant on (leave). A
// reservation p took over from another waiter is returned instead, with
// no store call: as a grant to act now (given up by p) once it is due.
// A reservation the store grants for later is recorded in p before the
// Take lets go of q.order.
func (p *queued) take(now func() time.Time, call func() (quota.Decision, error)) (quota.Decision, error) {
	q := p.q
	q.mu.Lock()
	if p.dropped {
		// A newcomer has its place (and waits for what it holds): it
		// must not charge the store.
		q.mu.Unlock()
		return quota.Decision{}, ErrQueueDropped
	}
	if res := p.res; res != nil {
		delay := p.due.Sub(now())
		if delay <= 0 {
			p.res = nil // it acts now
		}
		q.mu.Unlock()
		return quota.Decision{OK: true, Delay: max(delay, 0), Limit: -1, Reservation: res}, nil
	}
	q.mu.Unlock()
	q.order.RLock()
	defer q.order.RUnlock()
	// Dropped meanwhile: the call still goes, and its grant, recorded in
	// p, goes to the newcomer when p leaves.
	dec, err := call()
	if err == nil && dec.OK && dec.Delay > 0 && dec.Reservation != nil {
		q.mu.Lock()
		p.res, p.due = dec.Reservation, now().Add(dec.Delay)
		q.mu.Unlock()
	}
	return dec, err
}

// hold waits until the reservation p holds comes due, and returns it,
// given up by p: the request acts on it. The reservation may change while
// it waits, for an earlier one (shiftLocked). If ctx ends first, or a
// newcomer took the place, it returns how long it waited and ctx's
// error, and the reservation stays in p for leave.
func (p *queued) hold(ctx context.Context, now func() time.Time) (*quota.Reservation, time.Duration, error) {
	q := p.q
	start := now()
	q.mu.Lock()
	wait := p.due.Sub(start)
	q.mu.Unlock()
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			q.mu.Lock()
			res := p.res
			if !p.dropped && res != nil {
				p.res = nil
				q.mu.Unlock()
				return res, now().Sub(start), nil
			}
			q.mu.Unlock()
			if res == nil && !p.dropped {
				return nil, now().Sub(start), errors.New("throttle: queue: reservation lost")
			}
			// Dropped: its context ends at once.
			<-ctx.Done()
			return nil, now().Sub(start), ctx.Err()
		case <-p.moved:
			q.mu.Lock()
			wait = p.due.Sub(now())
			q.mu.Unlock()
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(max(wait, 0))
		case <-ctx.Done():
			return nil, now().Sub(start), ctx.Err()
		}
	}
}

// demandKey is what decides whether two requests of a rule ask the same
// of the store, so that one may act on the other's reservation: the
// scope, the pauses, the cost and the class, and every limit's name, key,
// cost, headroom and tenant.
func demandKey(d *demand) string {
	var b strings.Builder
	b.WriteString(d.Scope)
	b.WriteByte(0)
	b.WriteString(strconv.Itoa(d.Cost))
	if d.class != nil {
		b.WriteByte(0)
		b.WriteString(d.class.name)
	}
	for _, pk := range d.Pauses {
		b.WriteString("\x00p")
		b.WriteString(pk)
	}
	for i, l := range d.Limits {
		b.WriteString("\x00l")
		b.WriteString(l.Limit.Name)
		b.WriteByte(0)
		b.WriteString(l.Key)
		b.WriteByte(0)
		b.WriteString(strconv.Itoa(d.CostOf(i)))
		b.WriteByte(0)
		b.WriteString(strconv.Itoa(l.Headroom))
		b.WriteByte(0)
		b.WriteString(l.Tenant)
	}
	return b.String()
}

// queued is obtain for a request of r, whose rule has a queue, that may
// wait. With a place it waits as obtain does. Without one it is decided
// as if it could not wait: it goes if its quota is there now; refused,
// under RefuseNew it stays refused (the error wraps ErrQueueFull), and
// under DropOldest, if it could go within its wait, it takes the oldest
// waiter's place (and its reservation, or its turn to ask the store) and
// waits.
func (lim *Limiter) queued(ctx context.Context, r *rule, d *demand, pk string, ev *DecisionEvent) error {
	q := r.queue
	key := demandKey(d)
	wctx, p := q.enter(ctx, key, false)
	if p == nil {
		maxWait := d.MaxWait
		d.MaxWait = 0
		err := lim.obtain(ctx, r, d, pk, lim.now(), ev)
		var le *LimitError
		if err == nil || !errors.As(err, &le) || le.Err != nil || q.full == RefuseNew || le.RetryAfter > maxWait {
			return queueErr(err, r.id, ctx, false)
		}
		*ev = DecisionEvent{Rule: ev.Rule, Shadow: ev.Shadow, StoreTime: ev.StoreTime}
		d.MaxWait = maxWait
		wctx, p = q.enter(ctx, key, true)
	}
	defer p.leave(func(res *quota.Reservation) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
		defer cancel()
		_ = lim.cancel(cctx, res) // on failure, the charge runs out by itself
	})
	start := lim.now()
	if err := p.await(wctx); err != nil {
		ev.Outcome, ev.Wait = GaveUp, lim.now().Sub(start)
		return queueErr(&LimitError{Rule: r.id, Err: err}, r.id, wctx, true)
	}
	d.place = p
	defer func() { d.place = nil }()
	return queueErr(lim.obtain(wctx, r, d, pk, lim.now(), ev), r.id, wctx, true)
}

// queueErr returns err, the outcome of deciding a request of rule, with
// the queue's part in it: [ErrQueueFull] in the refusal of a request that
// got no place, [ErrQueueDropped] in the error of one whose place was
// taken (whatever its wait ended in: a sleep, a store call).
func queueErr(err error, rule string, wctx context.Context, placed bool) error {
	if err == nil {
		return nil
	}
	var le *LimitError
	isLimit := errors.As(err, &le)
	switch {
	case placed && errors.Is(context.Cause(wctx), ErrQueueDropped):
		if !isLimit {
			return &LimitError{Rule: rule, Err: ErrQueueDropped}
		}
		le.Err = ErrQueueDropped
	case !placed && isLimit && le.Err == nil:
		le.Err = ErrQueueFull
	}
	return err
}
