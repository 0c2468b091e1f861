package quota

import (
	"context"
	"time"
)

// A Syncer is a [Store] that can lower a counter to what the vendor says
// is left, so that a quota the vendor shares with clients we do not
// control (another service using the same token) is respected. Both
// stores of this module implement it; throttle.Learning.Sync needs it.
type Syncer interface {
	// Sync records that at most remaining more units of b may be admitted
	// in the next within (the vendor's reset). It only ever lowers what
	// b admits, never raises it:
	//
	//   - GCRA: the arrival time becomes at least now + within +
	//     (Burst-remaining)*T, so from now until the reset at most
	//     remaining units pass, spread over the interval;
	//   - FixedWindow and SlidingWindow: the count of the window that
	//     holds now becomes at least Rate-remaining, and every later
	//     window that starts before now + within becomes full (count at
	//     least Rate): a unit admitted in such a window before the reset
	//     would count in the vendor's current window, which has only
	//     remaining left, and the windows cannot tell before from after.
	//     With the windows [Limit.Anchored] to the vendor's, the reset is
	//     the end of the window that holds now, and no later window is
	//     touched;
	//   - SlidingLog: an entry is added at now so that the cost recorded
	//     in the last Per is at least Rate-remaining.
	//
	// A negative remaining is treated as 0; remaining at or above what b
	// admits, or a non-positive within, changes nothing.
	Sync(ctx context.Context, scope string, b Bucket, remaining int, within time.Duration) error
}
