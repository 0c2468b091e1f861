package throttle

import (
	"fmt"
	"time"

	"github.com/quotakit/throttle/quota"
)

// checkLeases fails if a rule has a Concurrency limit but the store is not
// a LeaseStore.
func (t *Transport) checkLeases() error {
	if _, ok := t.store.(quota.LeaseStore); ok {
		return nil
	}
	for _, r := range t.policy.rules {
		for j, l := range r.Limits {
			if l.Algorithm == Concurrency {
				return &PolicyError{Rule: r.id, Field: fmt.Sprintf("Limits[%d].Algorithm", j), Err: fmt.Errorf("the store (%T) has no concurrency limits: it does not implement throttle.LeaseStore", t.store)}
			}
		}
	}
	return nil
}

// An Option configures a [Transport].
type Option func(*Transport)

// WithStore makes the transport keep its counters in s, e.g. a
// redisstore.Store shared by every instance of a service. The default is a
// [memstore.Store] private to the transport.
func WithStore(s quota.Store) Option {
	return func(t *Transport) { t.store = s }
}

// WithClock makes the transport read the time from now instead of
// [time.Now], for tests. It is used to cap waits by context deadlines;
// stores keep their own clock.
func WithClock(now func() time.Time) Option {
	return func(t *Transport) {
		if now != nil {
			t.now = now
		}
	}
}
