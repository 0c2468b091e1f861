package throttle

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Learning configures what a [Rule] learns from the vendor's responses.
// The zero value learns with the defaults below; set Off to learn nothing.
//
// When a response says "slow down" (by default a 429, or a 503 with
// Retry-After), the transport records a pause for the rule's scope in the
// store, so every instance's next decision in that scope waits or fails
// until then, before sending rather than after its own 429. The pause lasts
// the response's Retry-After, or until its rate-limit reset, or, when the
// response gives neither, DefaultPause, doubling (with jitter) on each
// further such response until one succeeds. A response that reports no
// quota left (remaining 0 with a reset) pauses the scope until the reset
// even before a 429. Every pause is capped at MaxPause.
//
// Each instance also keeps the latest pause it learned in memory, so a
// store that loses its pauses (a Redis restart) does not send it to the
// vendor early.
type Learning struct {
	// Off disables learning for the rule.
	Off bool

	// MaxPause caps every pause learned from a response. Zero means
	// [DefaultMaxPause].
	MaxPause time.Duration

	// DefaultPause is the first pause after a "slow down" response that
	// says nothing about when to resume. Zero means 5 seconds (GitHub's
	// secondary limits want 60).
	DefaultPause time.Duration

	// Jitter is the most that is added, at random, to a recorded pause, so
	// a fleet does not resume at the same millisecond as the vendor's
	// reset. Zero means a tenth of the pause, at most one second; a
	// negative value disables it.
	Jitter time.Duration

	// Limited classifies a response as "slow down". Nil means
	// [DefaultLimited]. Vendor presets supply their own (GitHub's 403 with
	// no quota left).
	Limited func(resp *http.Response, fb Feedback) bool

	// ResetFormat says how the vendor writes its *-Reset headers; zero
	// decides by the value's shape.
	ResetFormat ResetFormat
}

// DefaultLimited reports a 429, or a 503 with a Retry-After, as "slow
// down".
func DefaultLimited(resp *http.Response, fb Feedback) bool {
	return resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable && fb.HasRetryAfter
}

const defaultPause = 5 * time.Second

// learner holds what a transport learned: the latest pause per scope, as a
// local copy of what it recorded in the store, and the backoff state of
// scopes whose "slow down" answers carried no retry time.
type learner struct {
	mu      sync.Mutex
	pauses  map[string]time.Time
	backoff map[string]*backoff.ExponentialBackOff
}

// localPause returns the end of the latest pause learned for scope, if it
// is after now.
func (l *learner) localPause(scope string, now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.pauses[scope]
	if !ok {
		return time.Time{}, false
	}
	if !until.After(now) {
		delete(l.pauses, scope)
		return time.Time{}, false
	}
	return until, true
}

// pauseFor returns how long r's scope must pause after resp (or 0), and
// whether resp said "slow down".
func (l *learner) pauseFor(r *rule, resp *http.Response, now time.Time) (time.Duration, bool) {
	cfg := r.Learn
	fb := ParseFeedback(resp.Header, now, ParseOptions{ResetFormat: cfg.ResetFormat, MaxPause: cfg.MaxPause})
	limited := cfg.Limited
	if limited == nil {
		limited = DefaultLimited
	}
	maxPause := cfg.MaxPause
	if maxPause <= 0 {
		maxPause = DefaultMaxPause
	}
	if !limited(resp, fb) {
		l.mu.Lock()
		delete(l.backoff, r.scope)
		l.mu.Unlock()
		if fb.Remaining == 0 && fb.Reset.After(now) {
			return min(fb.Reset.Sub(now), maxPause), false // quota spent: wait for the reset
		}
		return 0, false
	}
	if d := fb.PauseFor(now); d > 0 || fb.HasRetryAfter {
		return min(d, maxPause), true
	}
	// "Slow down" with no time given: back off exponentially per scope.
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.backoff[r.scope]
	if b == nil {
		first := cfg.DefaultPause
		if first <= 0 {
			first = defaultPause
		}
		b = &backoff.ExponentialBackOff{
			InitialInterval:     first,
			RandomizationFactor: 0.1,
			Multiplier:          2,
			MaxInterval:         maxPause,
			MaxElapsedTime:      0,
			Stop:                backoff.Stop,
			Clock:               backoff.SystemClock,
		}
		b.Reset()
		if l.backoff == nil {
			l.backoff = make(map[string]*backoff.ExponentialBackOff)
		}
		l.backoff[r.scope] = b
	}
	return min(b.NextBackOff(), maxPause), true
}

// record keeps a pause of d for scope locally and returns it with jitter
// added, for the store.
func (l *learner) record(r *rule, now time.Time, d time.Duration) time.Duration {
	j := r.Learn.Jitter
	if j == 0 {
		j = min(d/10, time.Second)
	}
	if j > 0 {
		d += rand.N(j + 1)
	}
	// Stores count whole microseconds and round a pause up; do the same
	// here so the local copy and the reported pause match the store's.
	d = (d + time.Microsecond - 1).Truncate(time.Microsecond)
	until := now.Add(d)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pauses == nil {
		l.pauses = make(map[string]time.Time)
	}
	if until.After(l.pauses[r.scope]) {
		l.pauses[r.scope] = until
	}
	return d
}

// learn reads resp, the answer to a request under rule r, and records the
// pause it calls for, locally and in the store. It reports whether resp
// said "slow down".
func (t *Transport) learn(ctx context.Context, r *rule, resp *http.Response) (limited bool) {
	if r.Learn.Off {
		return false
	}
	now := t.now()
	d, limited := t.learned.pauseFor(r, resp, now)
	if d <= 0 {
		return limited
	}
	d = t.learned.record(r, now, d)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	defer cancel()
	err := t.store.Pause(sctx, r.scope, "", d)
	if t.hooks.OnPause != nil {
		t.hooks.OnPause(PauseEvent{Rule: r.id, Status: resp.StatusCode, Pause: d, Err: err})
	}
	return limited
}

// storeCallTimeout bounds store calls made after the caller's part is
// done: recording a pause, returning a reservation.
const storeCallTimeout = time.Second

// Retry makes a [Rule] resend a request that was answered "slow down"
// (see [Learning.Limited]). Each resend goes through the limiter again: it
// is charged like any request and waits out the pause that the answer
// caused, within the rule's waiter budget and MaxWait. The previous
// response's body is drained (up to 64 KiB) and closed before the resend.
// A request whose body cannot be replayed (no GetBody) is not resent; nor
// is one the limiter will not admit in time: the caller then gets the
// "slow down" response itself.
type Retry struct {
	// Max is the most resends per request. Zero disables retries.
	Max int
	// MaxWait caps the time spent waiting for resends, in all. Zero means
	// [DefaultMaxPause].
	MaxWait time.Duration
}
