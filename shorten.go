package throttle

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
)

// Shortening: a log entry counts until its vendor window is known to end.
//
// The log of an Anchor limit (anchorLog) counts each request for a window
// and its reach from its charge, because it does not know where the
// vendor's window that holds the request starts. An answer tells more:
// its reset names that window, and the window began before the request
// that opened it arrived, which was before that request's answer. So
// every request answered with the same reset R was counted in a vendor
// window that ends by F+Per, F the earliest answer with reset R that
// this instance received: for windows on a grid and windows that start
// at a first request (GitHub's) alike. A vendor window ending at V holds
// requests charged before V-sendLag, whose entries must count in the
// log's window ending at V-sendLag-1µs (anchor.go): an entry of a
// request of that window may then stop counting at F+Per-sendLag, which
// the store is asked to do (quota.Shortener), for the answers of a burst
// in one call (shortenQueue). The log is then free for
// the vendor's next window as soon as it can start, where the entry's
// own span would keep it a reach later at every window: a saturated
// fleet's bursts drift a reach into the vendor's windows per window, and
// one window in Per/reach gets none. Shortened, they drift the first
// answer's round trip (F is that late after the window's first request
// reached the vendor), a few milliseconds: a fixed grid's window in
// Per/rtt gets none; only its phase removes that (AnchorGrid).
//
// It needs one vendor window per reset value: the reset written as an
// instant (ResetInstant), of a resolution no coarser than Per (two 500 ms
// windows may share a whole-second reset), and kept by the vendor for the
// window, as GitHub's X-RateLimit-Reset is. A reset that the vendor works
// out anew at each answer, from its clock and a delay each rounded
// apart, can name the end of one window in its last answers and of the
// next in its first: such vendors write the delay (Retry-After,
// RateLimit-Reset, the IETF t), which is read against the answer's own
// clock and not used here. A reset that moves with every answer gives
// each answer its own F, at worst its own receipt: the entry then counts
// until a window after it, which is never later than its span.

// maxOpened bounds phase.opened: past it, the windows a few windows older
// than the latest are dropped, and all of them if that is not enough.
const maxOpened = 16

// shortenLinger is how long the first shortening of a batch waits for
// more before the batch goes to the store: a burst's answers come a few
// milliseconds apart, and each would otherwise cost a store call of its
// own. An entry that stops counting that much later frees the log for
// no decision that matters: the next burst's is a window away, and a
// request decided meanwhile beyond the horizon (anchorHorizon) is held
// and decided again once the entries are shortened.
const shortenLinger = 10 * time.Millisecond

// A shortening is one answered entry to shorten (shortenAnswered): its
// Shortening, whose Within is counted when the batch is sent, the
// instant its entry is to stop counting on the local clock, and, once
// done is closed, the reservation to act on (nil if the store failed).
type shortening struct {
	sh   quota.Shortening
	end  time.Time
	done chan struct{}
	res  *quota.Reservation
}

// shortenQueue gathers the Limiter's shortenings, so that the answers of
// a burst go to the store together: one call (one round trip per scope
// on Redis) after shortenLinger, or as soon as a caller needs one of
// them done (awaitShorten).
type shortenQueue struct {
	mu      sync.Mutex
	pending []*shortening
	armed   bool // a flush is scheduled
}

// shortenAnswered asks the store to shorten the log entry that d's grant
// charged for its Anchor limit i (of bucket id, a window of per) to the
// end of the vendor window its answer fb, received at recv, names (see
// above), in the next batch of shortenings. d's Settle or Cancel acts on
// the reservation that results (awaitShorten).
func (lim *Limiter) shortenAnswered(d *demand, i int, id windowID, per time.Duration, recv time.Time, fb quotaheader.Feedback) {
	if _, ok := lim.store.(quota.Shortener); !ok {
		return
	}
	first, cuts := lim.learned.opened(id, per, fb, recv)
	j := d.anchorLogIndex(i)
	if !cuts || d.granted == nil || j < 0 || d.Limits[j].Limit.Algorithm != quota.SlidingLog || j >= len(d.granted.Marks) {
		return
	}
	if _, local := localReservation(d.granted); local {
		return // the local fallback's (failure.go): none of the shared store's entries
	}
	lim.awaitShorten(d) // one answer per request: none is pending
	p := &shortening{sh: quota.Shortening{Reservation: d.granted, Limit: j}, end: first.Add(per - sendLag(per)), done: make(chan struct{})}
	d.shortening = p
	q := &lim.shortens
	q.mu.Lock()
	q.pending = append(q.pending, p)
	arm := !q.armed
	q.armed = true
	q.mu.Unlock()
	if arm {
		time.AfterFunc(shortenLinger, lim.flushShortens)
	}
}

// flushShortens sends the shortenings gathered, for the timer that
// shortenAnswered armed.
func (lim *Limiter) flushShortens() {
	q := &lim.shortens
	q.mu.Lock()
	batch := q.pending
	q.pending, q.armed = nil, false
	q.mu.Unlock()
	lim.sendShortens(batch)
}

// awaitShorten returns once d's shortening, if any, is done, sending it
// with the rest of its batch at once if it waits, and makes the
// reservation it resulted in d's: d's Settle or Cancel must find the
// entry where it is.
func (lim *Limiter) awaitShorten(d *demand) {
	p := d.shortening
	if p == nil {
		return
	}
	d.shortening = nil
	q := &lim.shortens
	q.mu.Lock()
	var batch []*shortening
	if slices.Contains(q.pending, p) {
		batch, q.pending = q.pending, nil // the timer finds none, or later ones
	}
	q.mu.Unlock()
	lim.sendShortens(batch)
	<-p.done
	if p.res != nil && d.granted == p.sh.Reservation {
		d.granted = p.res
	}
}

// sendShortens asks the store to shorten batch's entries, in one call,
// and hands each its result.
func (lim *Limiter) sendShortens(batch []*shortening) {
	if len(batch) == 0 {
		return
	}
	defer func() {
		for _, p := range batch {
			close(p.done)
		}
	}()
	s, ok := lim.store.(quota.Shortener)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	defer cancel()
	// The store counts Within from when it gets the call, after now: each
	// entry ends no earlier than its end.
	now := lim.now()
	ss := make([]quota.Shortening, len(batch))
	for k, p := range batch {
		ss[k] = p.sh
		ss[k].Within = p.end.Sub(now)
	}
	res, _ := guardValue(ctx, lim, func(ctx context.Context) ([]*quota.Reservation, error) {
		return s.Shorten(ctx, ss...)
	})
	for k, p := range batch {
		if k < len(res) {
			p.res = res[k]
		}
	}
}

// opened returns the earliest answer this instance received, recv being
// one, for the vendor window of id that fb's reset names, and whether
// that reset can shorten entries (see above), which anchorHorizon reads.
func (l *learner) opened(id windowID, per time.Duration, fb quotaheader.Feedback, recv time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.phaseOf(id, per, recv)
	if p.uncut = fb.ResetInstant.IsZero() || fb.ResetResolution > per; p.uncut {
		return time.Time{}, false
	}
	r, a := fb.ResetInstant.UnixMicro(), recv.UnixMicro()
	if p.opened == nil {
		p.opened = make(map[int64]int64)
	}
	if f, ok := p.opened[r]; ok && f <= a {
		return time.UnixMicro(f), true
	}
	if len(p.opened) >= maxOpened {
		for k := range p.opened {
			if k < r-4*p.per {
				delete(p.opened, k)
			}
		}
		if len(p.opened) >= maxOpened {
			clear(p.opened)
		}
	}
	p.opened[r] = a
	return recv, true
}

// uncut reports whether the latest answer for id (of per) had a reset
// that cannot shorten entries.
func (l *learner) uncut(id windowID, per time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.windows[id]
	return p != nil && p.per == per.Microseconds() && p.uncut
}
