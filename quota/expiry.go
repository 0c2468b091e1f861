package quota

import (
	"fmt"
	"time"
)

// A LogExpiry scores the entry of a demand in a [SlidingLog] by the
// windows of a grid of its own (a vendor's) instead of by the instant it
// is decided for. The grid's windows last Every, and one of their ends
// lies, on the store's clock, in [Phase, Phase+Spread] modulo Every (an
// uncertain phase: Spread is how far the ends may be from Phase). The
// demand may be counted by the grid at instants up to Reach after the
// instant t it is decided for.
//
// Its entry is then at E-Per, where E is the latest end of a window of the
// grid that may hold t+Reach (with one end exactly at t+Reach, E is
// t+Reach+Every), so it counts in every window of the log ending in
// [E-Per, E), and no later. A demand is admitted at t when every window
// of the log ending in [t, E) holds at most Rate less its cost. Over the
// log's windows ending from t on, the entry counts in all the grid's
// windows that may hold an instant of [t+Reach-(Per-Every), t+Reach]: so
// no window of the grid holds more than Rate of the demands that reach it
// within Per-Every before their Reach. With Spread 0 that is a fixed
// window aligned on the grid's; a wider Spread counts an entry in every
// window that may hold it.
//
// With Every of 1µs every instant is an end, and the entry counts from t
// for Reach and 1µs: a log whose entries count for less than its Per,
// each for its own time.
//
// The zero LogExpiry (Every zero) keeps the log's own rule: the entry is
// at t, for Per.
type LogExpiry struct {
	Every  time.Duration // the grid's window, at least 1µs and at most the log's Per; zero: none
	Phase  time.Duration // in [0, Every): where one of the grid's windows may end, at the earliest
	Spread time.Duration // in [0, Every): how much later than Phase it may end
	Reach  time.Duration // at least 0 and at most the log's Per
}

// check checks e against the limit l of its bucket.
func (e LogExpiry) check(l Limit) (field string, err error) {
	switch {
	case e == LogExpiry{}:
		return "", nil
	case l.Algorithm != SlidingLog:
		return "Expiry", fmt.Errorf("scores log entries, and %v has none", l.Algorithm)
	case e.Every < time.Microsecond || e.Every > l.Per:
		return "Expiry.Every", fmt.Errorf("must be in [1µs, Per] = [1µs, %v], got %v", l.Per, e.Every)
	case e.Phase < 0 || e.Phase.Microseconds() >= e.Every.Microseconds():
		return "Expiry.Phase", fmt.Errorf("must be in [0, Every) = [0, %v), got %v", e.Every, e.Phase)
	case e.Spread < 0 || e.Spread.Microseconds() >= e.Every.Microseconds():
		return "Expiry.Spread", fmt.Errorf("must be in [0, Every) = [0, %v), got %v", e.Every, e.Spread)
	case e.Reach < 0 || e.Reach > l.Per:
		return "Expiry.Reach", fmt.Errorf("must be in [0, Per] = [0, %v], got %v", l.Per, e.Reach)
	}
	return "", nil
}
