package throttle

import (
	"context"
	"time"

	"github.com/quotakit/throttle/quota"
)

// What learning says about a request on its way out, at the two points
// where obtainOnce (admit.go) asks it: before the request is decided,
// [Limiter.pausedFor]; once it is granted, [Limiter.learnGrant], whose
// [sendPlan] says how long its caller waits (a reservation) or, when the
// grant's delay is over, whether it is sent or held ([sendPlan.clear]).
// learn.go's comment at the top has the whole path.

// pausedFor is where a request of rule r, with pause key pk, enters
// learning before it is decided: it returns how long after now the
// latest pause this instance learned for pk holds it back, zero when
// none does. The local copy holds even if the store lost the pause.
func (lim *Limiter) pausedFor(r *rule, pk string, now time.Time) time.Duration {
	until, ok := lim.learned.localPause(r.pauseID(pk), now)
	if !ok {
		return 0
	}
	return until.Sub(now)
}

// A sendPlan is what learning says about sending a granted request of
// demand d: when the store charged the grant to the log of each of d's
// Anchor limits (anchor.go), from which follow how long it waits before
// it is sent and whether it is held.
type sendPlan struct {
	lim     *Limiter
	d       *demand
	charges []anchorCharge
}

// learnGrant is where a granted request of demand d enters learning, as
// soon as call, the store call that granted it, has answered: it reads
// when the grant was charged to the log of each of d's Anchor limits
// ([Limiter.anchorCharges]) and returns the plan for sending it.
func (lim *Limiter) learnGrant(d *demand, call grantCall) *sendPlan {
	return &sendPlan{lim: lim, d: d, charges: lim.anchorCharges(d, call)}
}

// pace returns how long after now the request must wait before it is
// sent: sendLag after each of its charges ([anchorPace]). It is what the
// caller of a reservation waits, besides the grant's delay.
func (s *sendPlan) pace(now time.Time) time.Duration {
	return anchorPace(s.charges, now)
}

// clear decides, once the grant's delay is waited out, whether the
// request of rule r, whose grant was charged at decided or later, is
// sent now, in order:
//
//  1. a late grant (late.go) is retimed to now, or held: given back and
//     decided again at once ([Limiter.lateHold]); a retimed grant's
//     charges are read again;
//  2. the request waits until sendLag after its charges (pace);
//  3. a request that may reach the vendor in another window of an Anchor
//     limit than the one its charge is counted in is held until the
//     instants at which that window may end are past
//     ([Limiter.anchorHold]).
//
// It returns nil to send, a [heldGrant] to give the grant back and decide
// the demand again, or a *LimitError when ctx ended while it waited; ev
// counts what it did.
func (s *sendPlan) clear(ctx context.Context, r *rule, ev *DecisionEvent, decided time.Time) error {
	lim, d := s.lim, s.d
	now := lim.now()
	var hold bool
	granted := d.granted
	if decided, hold = lim.lateHold(ctx, d, ev, decided, now); hold {
		return heldGrant{now}
	}
	if d.granted != granted {
		// Retimed (late.go): charged anew, by a call that started at
		// decided.
		now = lim.now()
		s.charges = lim.anchorCharges(d, grantCall{asked: decided, answered: now, dec: quota.Decision{OK: true, Reservation: d.granted}})
	}
	if wait := s.pace(now); wait > 0 {
		waited := ev.Wait
		ev.Outcome, ev.Wait = Waited, waited+wait
		if slept, err := lim.sleep(ctx, wait, d.granted); err != nil {
			ev.Outcome, ev.Wait = GaveUp, waited+slept
			return &LimitError{Rule: r.id, Err: err}
		}
		now = lim.now()
	}
	until, hold, uncovered := lim.anchorHold(ctx, d, s.charges, now)
	if hold {
		return heldGrant{until}
	}
	ev.Uncovered = uncovered
	return nil
}

// heldGrant is [sendPlan.clear]'s answer for a grant that must be given
// back and its demand decided again, not before until: see
// [Limiter.anchorHold] and [Limiter.lateGrant]. [Limiter.obtain] does
// both.
type heldGrant struct{ until time.Time }

func (heldGrant) Error() string { return "throttle: grant held back, to be decided again" }
