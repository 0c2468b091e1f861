package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A Settler is a [Store] that can correct what a granted reservation
// charged once the real cost is known: some vendors report what a request
// cost only in its response (GitHub GraphQL's rateLimit.cost, the tokens
// an LLM API says it used). A caller charges an estimate (for a quota
// that must hold, the most a request can cost), sends the request, and
// settles the reservation with what the vendor reports. Both stores of
// this module implement it; throttle.Rule.Settle needs it.
//
// # Which limits
//
// Settle takes one cost per limit of the demand, in order. A positive
// cost replaces what the reservation charges that limit; 0 leaves the
// limit as it is charged. A [Concurrency] limit takes a slot, not a cost:
// its entry is ignored. To settle one total, give it to the limits charged
// the demand's cost (those whose Bucket.Cost is zero) and 0 to the others,
// which were charged a cost of their own (a write's 5 points next to a
// query's cost): that is what throttle.Rule.Settle does.
//
// # Semantics
//
// All limits are settled in one atomic step. For each limit, the
// difference between the new cost and what the reservation charges it
// now (the demand's cost, [Demand.CostOf], or the costs of an earlier
// Settle of it) is charged or given back, as far as the charge still
// counts:
//
//   - GCRA: the arrival time moves by the difference times T: TAT' =
//     max(TAT, now) + (new-old)*T, a bucket whose arrival time falls to
//     now or before being full. A refund is exact when no other demand
//     was granted on the bucket since; otherwise the demands granted
//     since keep their instants, and a refund may let the bucket admit up
//     to the refunded units sooner than if the real cost had been charged
//     in the first place. A GCRA charge can be settled until Per after the
//     arrival time it set.
//   - FixedWindow and SlidingWindow: the count of the window charged
//     moves by the difference (never below 0), while the window still
//     counts: until its end, or for SlidingWindow the end of the next
//     window, which weighs it as its previous. A window that no longer
//     counts is left as it is: it can delay and admit nothing any more.
//   - SlidingLog: the charge's entry takes the new cost, while it is in
//     the log (until Per after its instant).
//   - Concurrency: nothing changes.
//
// An extra charge beyond what a limit can admit is never an error: it is
// a debt that delays later demands (an arrival time beyond the burst, a
// window or log holding more than Rate) until it has passed.
//
// Settling twice does not charge twice: the store remembers the costs a
// reservation was settled to for as long as any of its charges can still
// be settled, and a later Settle moves each limit from those costs.
// Settling again with the same costs changes nothing, so a Settle whose
// answer was lost may be sent again; with other costs, the later Settle
// corrects the earlier one.
//
// Settle is for a charge whose action took place, Cancel for one whose
// action will not: do not cancel a settled reservation (Cancel gives back
// the demand's costs, not the settled ones). An error means the
// reservation may or may not have been settled.
type Settler interface {
	// Settle replaces what r, a reservation granted by this store's Take
	// (or a Claim of it), charges each limit of its demand with costs[i],
	// 0 leaving limit i as it is. costs must have one entry per limit,
	// none negative ([Reservation.CheckCosts]).
	Settle(ctx context.Context, r *Reservation, costs []int) error
}

// CheckCosts checks what every [Settler] requires of a settlement of r:
// a reservation with its demand and its store's marks, and one cost per
// limit of the demand, none negative, and none so large that Per times it
// cannot be counted exactly. A problem with costs is a [*FieldError]
// (matching [ErrInvalid]).
func (r *Reservation) CheckCosts(costs []int) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return errors.New("throttle: settle: malformed reservation")
	}
	if len(costs) != len(r.Demand.Limits) {
		return &FieldError{Field: "costs", Err: fmt.Errorf("has %d entries for %d limits", len(costs), len(r.Demand.Limits))}
	}
	for i, c := range costs {
		if c < 0 {
			return &FieldError{Field: fmt.Sprintf("costs[%d]", i), Err: fmt.Errorf("must not be negative, got %d", c)}
		}
		// As for a limit's Rate: Per times the cost must count exactly.
		if l := r.Demand.Limits[i].Limit; l.Per >= time.Microsecond && int64(c) > maxUnits/l.Per.Microseconds() {
			return &FieldError{Field: fmt.Sprintf("costs[%d]", i), Err: fmt.Errorf("%d per %v is too large to count exactly", c, l.Per)}
		}
	}
	return nil
}
