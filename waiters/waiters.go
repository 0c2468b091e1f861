// Package waiters provides the standard answers to "how long may this
// request wait for its quota?": not at all ([FailFast]), up to a bound
// ([UpTo]), or as long as it takes ([Block]).
//
// A waiter only states a budget. The store uses it to decide atomically
// whether to hold a future slot for the request (a reservation) or to
// refuse it at once without charging anything, so a request never waits
// only to be refused at the end. The caller then sleeps on a timer until
// its slot, and gives the slot back if its context ends first.
//
// Every budget is further capped by the request context's deadline: a
// request whose slot would come after its deadline is refused at once.
//
// The package uses only standard types; any value with a MaxWait method of
// the same signature serves as a throttle.Waiter.
package waiters

import (
	"context"
	"math"
	"time"
)

// Forever is the budget of [Block]: longer than any wait.
const Forever = time.Duration(math.MaxInt64)

// A Waiter states how long a request may wait for its quota. It is safe
// for concurrent use.
type Waiter struct {
	budget time.Duration
	name   string
}

// MaxWait returns the longest the request with context ctx may wait. The
// caller also caps it by ctx's deadline.
func (w Waiter) MaxWait(ctx context.Context) time.Duration { return w.budget }

// String returns the waiter's name, e.g. "up-to(30s)".
func (w Waiter) String() string { return w.name }

// FailFast returns a waiter that never waits: a request that cannot be
// sent now fails with the time it could be retried.
func FailFast() Waiter { return Waiter{budget: 0, name: "fail-fast"} }

// UpTo returns a waiter that waits at most d. A request whose quota comes
// later fails at once, holding nothing. A non-positive d is [FailFast].
func UpTo(d time.Duration) Waiter {
	if d <= 0 {
		return FailFast()
	}
	return Waiter{budget: d, name: "up-to(" + d.String() + ")"}
}

// Block returns a waiter that waits as long as needed, until the request's
// context ends.
func Block() Waiter { return Waiter{budget: Forever, name: "block"} }
