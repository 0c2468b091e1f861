package throttle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// This file holds the bound on a rule's waiting requests ([Rule.MaxQueue]):
// a request that may wait takes a place in its rule's queue before it is
// decided and leaves it when it goes or fails. When no place is left it is
// decided as if it could not wait; a refusal then either stands
// (RefuseNew) or takes the oldest waiter's place (DropOldest).

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
	// DropOldest makes the longest waiter give its quota back and fail
	// ([ErrQueueDropped]), and the newcomer waits (Bottleneck's "LEAK").
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

	mu      sync.Mutex
	waiting []*queued // oldest first
}

// queued is one request's place.
type queued struct {
	drop context.CancelCauseFunc
}

// enter takes a place for a request whose context is ctx, taking the
// oldest waiter's when evict is set and none is free. It returns the
// context to wait with (cancelled with cause ErrQueueDropped when the
// place is taken from it), the function that leaves the queue (call it
// once, when the request goes or fails), and whether it got a place; a
// request without one must not wait.
func (q *waitQueue) enter(ctx context.Context, evict bool) (context.Context, func(), bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) >= q.max {
		if !evict {
			return ctx, func() {}, false
		}
		oldest := q.waiting[0]
		q.waiting = q.waiting[1:]
		oldest.drop(ErrQueueDropped)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	p := &queued{drop: cancel}
	q.waiting = append(q.waiting, p)
	return wctx, func() {
		q.mu.Lock()
		if i := slices.Index(q.waiting, p); i >= 0 {
			q.waiting = slices.Delete(q.waiting, i, i+1)
		}
		q.mu.Unlock()
		cancel(nil)
	}, true
}

// queued is obtain for a request of r, whose rule has a queue, that may
// wait. With a place it waits as obtain does. Without one it is decided
// as if it could not wait: it goes if its quota is there now; refused,
// under RefuseNew it stays refused (the error wraps ErrQueueFull), and
// under DropOldest, if it could go within its wait, it takes the oldest
// waiter's place and is decided again, waiting this time.
func (lim *Limiter) queued(ctx context.Context, r *rule, d *demand, pk string, ev *DecisionEvent) error {
	q := r.queue
	wctx, leave, placed := q.enter(ctx, false)
	if !placed {
		maxWait := d.MaxWait
		d.MaxWait = 0
		err := lim.obtain(ctx, r, d, pk, lim.now(), ev)
		var le *LimitError
		if err == nil || !errors.As(err, &le) || le.Err != nil || q.full == RefuseNew || le.RetryAfter > maxWait {
			return queueErr(err, r.id, ctx, false)
		}
		*ev = DecisionEvent{Rule: ev.Rule, Shadow: ev.Shadow, StoreTime: ev.StoreTime}
		d.MaxWait = maxWait
		wctx, leave, placed = q.enter(ctx, true)
	}
	defer leave()
	return queueErr(lim.obtain(wctx, r, d, pk, lim.now(), ev), r.id, wctx, placed)
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
