package quota

import "context"

// A Retimer is a [Store] that can move what a granted reservation charged
// to the instant its action really takes place. A grant whose answer
// arrives late (a slow store, a stalled process) would otherwise be acted
// on after the instant it was charged for, and the vendor would count it
// where the store did not: after a sliding log's oldest charge has left
// the window, or in the next fixed window. Retiming it to the send keeps
// its place when the limits have room then; giving it back and asking
// again would put it behind every reservation made meanwhile. Both stores
// of this module implement it; throttle's late grants use it when the
// store offers it.
//
// # Semantics
//
// Retime moves the charge of r, on every limit of its demand, from the
// instant it was made for to the store's current time, now, in one
// atomic step: all limits or none. For each limit:
//
//   - SlidingLog: the charge's entry leaves its instant and is logged at
//     now (an entry no longer in the log is simply logged at now);
//   - FixedWindow and SlidingWindow: the cost leaves the window charged
//     and counts in the window that holds now; nothing changes while that
//     is the window charged. A window that no longer counts, or (for an
//     [Limit.Anchored] limit) whose windows moved since, gives nothing
//     back, as with Cancel;
//   - GCRA: nothing changes while the bucket's arrival time before the
//     charge (the mark less cost*T) is at or after now: a request sent
//     now is counted where the store counted it, the bucket having had no
//     time to drain. Otherwise the charge is made again at now: given
//     back and charged at now if no later demand was granted on the
//     bucket since (see [Reservation]), or charged at now on top of the
//     bucket's arrival time if that is now or before (every charge has
//     drained). A bucket with later grants still ahead of now cannot move
//     the charge: Retime refuses;
//   - Concurrency: nothing changes; a slot held stays held, an unclaimed
//     reservation stays unclaimed ([LeaseStore.Claim]).
//
// It succeeds when, with the charges moved, every limit admits the
// demand's cost at now as Take would decide it (a sliding log's entries
// ahead of now included, every window that holds the moved charge within
// the rate; a [Bucket.Headroom] is always held, never lent) and no pause
// of the demand is in force. The decision is then granted: OK, Delay 0,
// Limit -1, ResetAfter as for a grant at now, Remaining 0, and a
// Reservation that is a copy of r with the marks of the moved charges and
// r's ID: act on, cancel or settle that one from then on. Otherwise
// nothing changes and the decision is refused: Limit is the index of a
// limit that has no room at now, or -1 with Pause naming the pause in
// force; Delay is 0, since Retime does not look for a later instant (Take
// does). r is still valid: its holder cancels it and asks again. Retime
// does not move a tenant's share clock or note a class (see [Store]).
//
// Retime moves the demand's costs ([Demand.CostOf]): call it before the
// action, never on a settled reservation ([Settler]). An error means the
// charges may or may not have moved; the holder then cancels r, which
// gives back what is still where r says, and what moved runs out by
// itself.
type Retimer interface {
	// Retime moves r's charges to the store's current time if every limit
	// admits them there, all or none, and returns the reservation to act
	// on; refused, it changes nothing.
	Retime(ctx context.Context, r *Reservation) (Decision, error)
}
