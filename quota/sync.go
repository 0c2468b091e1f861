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
	//   - FixedWindow and SlidingWindow: the last window that starts
	//     before now + within (the one that holds the reset, and mostly
	//     the vendor's window) gets a count of at least Rate-remaining,
	//     and every window from the one that holds now up to it becomes
	//     full (count at least Rate): what they admitted before the reset
	//     would count in the vendor's window too, which has only
	//     remaining left. So from now to the reset at most remaining
	//     units pass. When the reset falls in the window that holds now
	//     (windows [Limit.Anchored] to the vendor's), that window alone
	//     gets Rate-remaining;
	//   - SlidingLog: an entry is added at now so that the cost recorded
	//     in the last Per is at least Rate-remaining.
	//
	// A negative remaining is treated as 0; remaining at or above what b
	// admits, or a non-positive within, changes nothing.
	Sync(ctx context.Context, scope string, b Bucket, remaining int, within time.Duration) error
}
