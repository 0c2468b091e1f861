package throttle

import (
	"time"

	"github.com/quotakit/throttle/quotaheader"
)

// A reset written as an instant (GitHub's epoch seconds) is on the
// vendor's clock. quotaheader reads it against the answer's Date, so
// that clock skew cancels; but Date has whole seconds, so that reading
// errs late by up to a second (plus the answer's time in flight): a
// pause until it, on windows of a second or two, ends a window late.
//
// Each answer with a Date is evidence of the vendor's clock: the vendor
// wrote Date at an instant of its clock in [Date, Date+1s), which was an
// instant of ours between when the request was sent and when its answer
// came back. So the offset (the vendor's clock minus ours) is in
// (Date-recv, Date+1s-sent]. Intersected over a scope's answers, it
// narrows to about a round trip; the reset on our clock is then at most
// R minus the offset's lower bound: never early, and late by no more than
// the reset's own rounding and the evidence's width. Evidence that
// contradicts what is known (the vendor's clock stepped) replaces it.

// vendorClock is what a scope's answers say of the vendor's clock offset,
// in µs: in (lo, hi].
type vendorClock struct{ lo, hi int64 }

// maxClocks bounds learner.clocks; past it, the map starts again.
const maxClocks = 4096

// clockReset returns fb's Reset, read on the vendor's clock as learned
// from scope's answers (fb's included, sent at sent and received at
// recv), when fb wrote its reset as an instant and had a Date; else
// fb.Reset. It is never earlier than the vendor's reset, and never later
// than fb.Reset.
func (l *learner) clockReset(scope string, sent, recv time.Time, fb quotaheader.Feedback) time.Time {
	if fb.ResetInstant.IsZero() || fb.Date.IsZero() || fb.Reset.IsZero() {
		return fb.Reset
	}
	if sent.IsZero() || sent.After(recv) {
		sent = recv
	}
	d := fb.Date.UnixMicro()
	lo, hi := d-recv.UnixMicro(), d+time.Second.Microseconds()-sent.UnixMicro()
	l.mu.Lock()
	c, ok := l.clocks[scope]
	switch {
	case !ok:
		if l.clocks == nil || len(l.clocks) >= maxClocks {
			l.clocks = make(map[string]vendorClock)
		}
		c = vendorClock{lo, hi}
	case max(c.lo, lo) >= min(c.hi, hi):
		c = vendorClock{lo, hi} // contradicted: start again
	default:
		c = vendorClock{max(c.lo, lo), min(c.hi, hi)}
	}
	l.clocks[scope] = c
	l.mu.Unlock()
	reset := time.UnixMicro(fb.ResetInstant.UnixMicro() - c.lo)
	if reset.After(fb.Reset) {
		return fb.Reset
	}
	return reset
}
