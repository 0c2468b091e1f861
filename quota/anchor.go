package quota

import (
	"context"
	"time"
)

// An Anchorer is a [Store] that can move the windows of an
// [Limit.Anchored] limit to where the vendor's windows start, as the
// vendor's reset headers tell (X-RateLimit-Reset, the IETF RateLimit
// reset). Both stores of this module implement it; throttle.Learning.Anchor
// needs it.
//
// # What moving keeps
//
// The windows move, the units already charged do not go away: the vendor
// counted them, in whichever of its windows they were sent. A store keeps,
// for each window, its count and the latest instant at which a unit
// charged to it may be sent (a reservation's instant; units granted at
// once were sent at or before now). The units of an old window are then
// known to lie between its start and the earliest of its end, and the
// latest of now and that instant; each is counted again in every new
// window that meets that span. So no new window counts fewer units than
// were (or will be) sent inside it, and nothing is admitted that the
// vendor's window, once it is the new one, has no room for; a unit whose
// span straddles a new boundary is counted on both sides until those
// windows pass. Reservations granted before the move keep their instants.
// A reservation cancelled after its window moved gives nothing back; one
// settled ([Settler]) after it gets no refund, and an extra charge counts
// in every new window that may hold the request.
type Anchorer interface {
	// Anchor records that the vendor's current window for b ends within
	// from now (on the store's clock), and moves b's windows so that one
	// ends there, unless a window of b already ends within tolerance of
	// that instant (modulo Per) and their phase was learned from an
	// earlier Anchor: the jitter of a reset given in whole seconds then
	// does not move them at every response, while a phase that came from
	// the counter's first charge (or a sync), which says nothing of the
	// vendor's, always gives way. moved reports a move (or a first
	// phase); ends is the time from now until the window of b that holds
	// now ends, after any move.
	//
	// b's limit must be Anchored; a non-positive within changes nothing,
	// and moved then reports whether the phase was learned from an
	// Anchor (rather than from a first charge or a sync).
	// A negative tolerance counts as zero, and one of Per/2 or more
	// moves only a counter with no state.
	Anchor(ctx context.Context, scope string, b Bucket, within, tolerance time.Duration) (ends time.Duration, moved bool, err error)
}
