package policyfile

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
)

// A Reloader is an [http.RoundTripper] that applies the policy of a file
// and takes up a new version of the file without dropping a request: each
// request runs on the [throttle.Transport] current when it starts, to its
// end, while [Reloader.Reload] builds the next one from the file and swaps
// it in atomically. A file that does not load (see [Load]) is refused and
// the current policy stays in force.
//
// Every Transport it builds shares one store: the one given with
// [throttle.WithStore], or else one [memstore.Store] made by
// [NewReloader]. So counters and shared pauses carry over a reload: a
// limit that keeps its name and algorithm keeps what it charged. What a
// Transport holds for itself starts afresh with the next one: its own
// copies of learned pauses (the store's shared copies remain), its
// breaker state and its open-fallback count.
//
// A Reloader is safe for concurrent use.
type Reloader struct {
	path string
	base http.RoundTripper
	opts []throttle.Option

	cur atomic.Pointer[throttle.Transport]

	mu         sync.Mutex // serializes reloads; guards the fields below
	sum        [32]byte   // SHA-256 of the file in force
	bad        [32]byte   // SHA-256 of the last file refused, if badErr
	badErr     error      // why it was refused
	unreadable bool       // the last read failed
}

var _ http.RoundTripper = (*Reloader)(nil)

// NewReloader loads the policy file at path and returns a Reloader that
// applies it with base (nil: [http.DefaultTransport]) and opts, as
// [throttle.NewTransport] does. Without a [throttle.WithStore] among
// opts, it makes one [memstore.Store] that every policy version
// uses. It returns the file's errors, like [LoadFile].
func NewReloader(path string, base http.RoundTripper, opts ...throttle.Option) (*Reloader, error) {
	all := append([]throttle.Option{throttle.WithStore(memstore.New())}, opts...) // a later WithStore wins
	r := &Reloader{path: path, base: base, opts: all}
	if _, err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// RoundTrip implements [http.RoundTripper] with the current Transport.
func (r *Reloader) RoundTrip(req *http.Request) (*http.Response, error) {
	return r.cur.Load().RoundTrip(req)
}

// Transport returns the Transport now in force, e.g. for
// [throttle.Transport.LearnedPause].
func (r *Reloader) Transport() *throttle.Transport { return r.cur.Load() }

// CloseIdleConnections closes the idle connections of the base transport,
// as [throttle.Transport.CloseIdleConnections] does.
func (r *Reloader) CloseIdleConnections() { r.cur.Load().CloseIdleConnections() }

// Reload reads the file again and, if its contents changed, puts its
// policy in force for requests that start from then on. It reports
// whether it did. If the file cannot be read or loaded, or the Transport
// cannot be built with it, Reload returns the error (for a bad file, the
// errors of [Load]) and the current policy stays in force.
func (r *Reloader) Reload() (bool, error) {
	changed, _, err := r.reload()
	return changed, err
}

// reload is Reload that also reports whether the error is the same as
// the previous call's, for the same file contents (or the file was
// unreadable then too).
func (r *Reloader) reload() (changed, again bool, err error) {
	data, err := os.ReadFile(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		again, r.unreadable = r.unreadable, true
		return false, again, fmt.Errorf("policyfile: %w", err)
	}
	r.unreadable = false
	sum := sha256.Sum256(data)
	switch {
	case r.cur.Load() != nil && sum == r.sum:
		return false, false, nil
	case r.badErr != nil && sum == r.bad:
		return false, true, r.badErr
	}
	t, err := r.build(data)
	if err != nil {
		r.bad, r.badErr = sum, err
		return false, false, err
	}
	r.cur.Store(t)
	r.sum, r.badErr = sum, nil
	return true, false, nil
}

func (r *Reloader) build(data []byte) (*throttle.Transport, error) {
	p, b, err := load(r.path, data)
	if err != nil {
		return nil, err
	}
	t, err := throttle.NewTransport(r.base, p, r.opts...)
	if err != nil {
		b.validated(err) // with the file's line, rule and field
		return nil, b.err()
	}
	return t, nil
}

// Watch checks the file every interval (at least 10ms) until ctx ends and
// reloads it when its contents change. After each reload it calls
// report, if not nil, with nil when the new policy is in force, or with
// the error that kept the old one. A refused file is reported once, not
// at every check, until its contents change; an unreadable file (say,
// while an editor replaces it) once until it is read again. Run it on its own
// goroutine:
//
//	go r.Watch(ctx, 5*time.Second, func(err error) { ... log it ... })
//
// Watch returns when ctx ends.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration, report func(error)) {
	tick := time.NewTicker(max(interval, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		changed, again, err := r.reload()
		if report != nil && (changed || err != nil && !again) {
			report(err)
		}
	}
}
