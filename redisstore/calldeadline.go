package redisstore

import (
	"context"
	"sync/atomic"
	"time"
)

// callDeadlines hands out the per-call timeout of calls made with a
// context that carries nothing (context.Background or context.TODO, as
// for an http.Request made without one): instead of a context.WithTimeout
// per call (a timer started and stopped, a channel and a few allocations
// on every decision), calls that start within a short span share one
// context whose deadline and Done channel are those of the earliest of
// them. Each such call is thus bounded by between timeout - grain and
// timeout, never more. Calls with any other context get their own
// context.WithTimeout, since theirs may be cancelled or carry values.
type callDeadlines struct {
	cur   atomic.Pointer[sharedDeadline]
	clock func() time.Time // tests only; nil: time.Now
}

// deadlineGrain is how much earlier than its own timeout a call's shared
// deadline may fall: a sixteenth of the timeout, so under load a Store
// starts about sixteen timers per timeout instead of one per call.
func deadlineGrain(timeout time.Duration) time.Duration { return timeout / 16 }

// get returns a context that ends within timeout of now and no sooner than
// timeout - deadlineGrain(timeout).
func (c *callDeadlines) get(timeout time.Duration) context.Context {
	now := time.Now
	if c.clock != nil {
		now = c.clock
	}
	want := now().Add(timeout)
	if d := c.cur.Load(); d != nil && !d.deadline.After(want) && want.Sub(d.deadline) <= deadlineGrain(timeout) {
		return d
	}
	d := &sharedDeadline{deadline: want, done: make(chan struct{})}
	time.AfterFunc(timeout, func() {
		d.expired.Store(true)
		close(d.done)
	})
	c.cur.Store(d)
	return d
}

// A sharedDeadline is a context without values that ends at deadline.
type sharedDeadline struct {
	deadline time.Time
	done     chan struct{}
	expired  atomic.Bool
}

// Deadline implements context.Context.
func (d *sharedDeadline) Deadline() (time.Time, bool) { return d.deadline, true }

// Done implements context.Context.
func (d *sharedDeadline) Done() <-chan struct{} { return d.done }

// Err implements context.Context: context.DeadlineExceeded once the
// deadline has passed.
func (d *sharedDeadline) Err() error {
	if d.expired.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

// Value implements context.Context: a sharedDeadline carries no values.
func (d *sharedDeadline) Value(any) any { return nil }

// String names the context, as the standard library's do.
func (d *sharedDeadline) String() string { return "redisstore.callContext" }
