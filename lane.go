package throttle

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// This file holds the line in which a restricted request waits to ask
// the store again. A store never grants a request with a headroom
// ([Class]) or over its fair share ([Limit].Tenant) a reservation: it
// refuses it, with the time until it could go. Such a request, when its
// waiter allows that long, sleeps until then and asks again; requests of
// one line (rule, class, and every limit's key and tenant) take turns,
// so that one of them asks at a time and a backlog of thousands costs
// the store one call per grant and instance, not one per waiting request.

// inLine reports whether d is decided in line: it may wait (and is not a
// Reserve, whose caller waits), and the store may refuse it only because
// it may not reserve: it has a headroom or a limit shared among tenants.
func (d *demand) inLine() bool {
	return d.MaxWait > 0 && !d.reserve && (d.Restricted() || d.Shared())
}

// lanes are a Limiter's lines, by key. Safe for concurrent use.
type lanes struct {
	mu sync.Mutex
	m  map[string]*lane
}

// A lane is one line: turn holds a value while a request of the line has
// its turn (a send blocks behind the others, in order).
type lane struct {
	turn chan struct{}
	refs int // requests in the line, their turn included
}

// enter joins the line of key.
func (ls *lanes) enter(key string) *lane {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = map[string]*lane{}
	}
	ln := ls.m[key]
	if ln == nil {
		ln = &lane{turn: make(chan struct{}, 1)}
		ls.m[key] = ln
	}
	ln.refs++
	return ln
}

// leave leaves the line of key, and forgets it when it is empty.
func (ls *lanes) leave(key string, ln *lane) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ln.refs--; ln.refs == 0 {
		delete(ls.m, key)
	}
}

// laneKey names d's line: its rule, class, and every limit's name, key
// and tenant.
func laneKey(r *rule, d *demand) string {
	var b strings.Builder
	b.WriteString(r.id)
	if d.class != nil {
		b.WriteString("\x00")
		b.WriteString(d.class.name)
	}
	for _, l := range d.Limits {
		b.WriteString("\x00")
		b.WriteString(l.Limit.Name)
		b.WriteString("\x00")
		b.WriteString(l.Key)
		b.WriteString("\x00")
		b.WriteString(l.Tenant)
	}
	return b.String()
}

// takeInLine decides d, which inLine, as [Limiter.takeSlot] does. While
// the store refuses it within its budget (d.MaxWait), it waits for its
// turn in its line, then until the instant the store named, and asks
// again, up to half an emission interval early. A grant's Delay is then at
// most that (a reservation), and ev says how long it waited.
func (lim *Limiter) takeInLine(ctx context.Context, r *rule, d *demand, ev *DecisionEvent) (quota.Decision, error) {
	dec, err := lim.takeSlot(ctx, r, d, ev)
	if err != nil || !retries(d, dec) {
		return dec, err
	}
	start, budget, waited := lim.now(), d.MaxWait, ev.Wait
	asked := start // when dec's answer came
	spent := func() time.Duration { return lim.now().Sub(start) }
	key := laneKey(r, d)
	ln := lim.lanes.enter(key)
	defer lim.lanes.leave(key, ln)

	timer := time.NewTimer(budget)
	select {
	case ln.turn <- struct{}{}:
		timer.Stop()
		defer func() { <-ln.turn }()
	case <-timer.C:
		dec.Delay = max(dec.Delay-spent(), 0)
		ev.Wait = waited + spent()
		return dec, nil
	case <-ctx.Done():
		timer.Stop()
		ev.Outcome, ev.Wait = GaveUp, waited+spent()
		return quota.Decision{}, &LimitError{Rule: r.id, Err: ctx.Err()}
	}
	// The store grants a restricted demand as a reservation up to early
	// ahead (quota.Store, Headroom and fair shares): asking that much
	// before the instant it named takes the unit at its instant, however
	// late a loaded machine wakes and the call arrives, within early.
	early := time.Duration(quotamath.RestrictedWait(&d.Demand)) * time.Microsecond
	for {
		// The rest of dec's delay: none if the turn came after it.
		rest := dec.Delay - lim.now().Sub(asked)
		if rest > budget-spent() {
			dec.Delay = rest
			break
		}
		// Early only from further than early: a refusal within it was not
		// for want of a reservation (a claim or a held headroom), so
		// asking again before its end would only be refused again.
		wait := rest
		if rest > early {
			wait = rest - early
		}
		if wait > 0 {
			if _, err := lim.sleep(ctx, wait, nil); err != nil {
				ev.Outcome, ev.Wait = GaveUp, waited+spent()
				return quota.Decision{}, &LimitError{Rule: r.id, Err: err}
			}
		}
		d.MaxWait = max(budget-spent(), 0)
		dec, err = lim.takeSlot(ctx, r, d, ev)
		// Counted from the answer, the delay never ends more than early
		// before the instant the store named, whatever the call's latency.
		asked = lim.now()
		if err != nil || !retries(d, dec) {
			break
		}
	}
	if err == nil && dec.OK {
		ev.Outcome = Waited
	}
	ev.Wait = waited + spent()
	return dec, err
}

// retries reports whether d, decided in line, asks again after dec: a
// refusal within its budget that no in-flight slot bound (takeSlot waits
// for those).
func retries(d *demand, dec quota.Decision) bool {
	return !dec.OK && dec.Delay <= d.MaxWait && !slotBound(d, dec)
}
