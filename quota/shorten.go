package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A Shortener is a [Store] that can end early what a granted reservation
// counts in a [SlidingLog]. A log counts each entry for Per; a caller may
// learn later that its action is counted by the vendor in a window that
// ends sooner (the vendor named the window in its answer, and that window
// began before the first answer that named it). Shortening the entry then
// frees the log for the next window as soon as the vendor's does, where
// the log's own rule would keep it for the rest of Per. Both stores of
// this module implement it; throttle's anchoring (Learning.Anchor) uses it
// when the store offers it.
//
// # Semantics
//
// Shorten makes the entry that a reservation r charged to its limit i, a
// SlidingLog, count in no window of the log ending at or after E =
// now+within, on the store's clock: the entry moves from its instant x to E-Per when that is
// earlier than x. It then counts in the log's windows ending in
// [E-Per, E), and in none from E on. When E-Per is not earlier than x,
// or the entry is no longer in the log (it was cancelled, or its windows
// have passed), nothing changes. The move is one atomic step; the
// entries after the moved one keep their instants.
//
// The entry counts, after the move, in windows ending before x in which
// it did not count before: a store never counts less in them, so the
// move never admits more than the log's own rule in a window ending
// before E. From E on the log admits as if the request had not been
// charged: only a caller that knows its action will not count in the
// vendor's windows from E on may shorten it.
//
// The entries of one call move independently, each in one atomic step:
// a store may move them in several steps (redisstore: one round trip per
// scope), and need not keep their order. Each result reflects its own
// entry's move only: two limits of one reservation shortened in one call
// give two copies, each with one new mark.
//
// It returns, for each entry, the reservation to act on, cancel or settle
// from then on: a copy of its reservation whose mark for the limit is the
// entry's new instant, or the reservation itself when nothing moved. An
// error means an entry may or may not have moved: the slice returned
// then, when not nil, holds the outcomes the store knows and the
// reservation itself for the others, whose marks may name their old
// instants, where a later Cancel or Settle no longer finds them (the
// entry keeps counting what it was charged until it ends). A store whose
// calls may be sent again after a lost reply refuses the resent one
// (redisstore's ReplayDetect) rather than answer "not moved" with stale
// marks.
type Shortener interface {
	// Shorten ends the count of each entry that ss names early: see
	// [Shortener]. The result has one reservation per element of ss, in
	// its order. A Shortening that fails [Reservation.CheckShorten] is a
	// [*FieldError] (matching [ErrInvalid]) and nothing is shortened.
	Shorten(ctx context.Context, ss ...Shortening) ([]*Reservation, error)
}

// A Shortening names an entry for [Shortener.Shorten] to end early: the
// one that Reservation, granted by the store's Take (or retimed by its
// Retime), charged to its limit Limit (an index of its demand's Limits,
// a [SlidingLog]), to count in no window of the log ending at or after
// now+Within on the store's clock.
type Shortening struct {
	Reservation *Reservation
	Limit       int
	Within      time.Duration
}

// CheckShorten checks what every [Shortener] requires of a shortening of
// r's limit i: a reservation with its demand and its store's marks, and
// i naming a [SlidingLog] of the demand. A problem with i is a
// [*FieldError] (matching [ErrInvalid]).
func (r *Reservation) CheckShorten(i int) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return errors.New("throttle: shorten: malformed reservation")
	}
	if i < 0 || i >= len(r.Demand.Limits) {
		return &FieldError{Field: "i", Err: fmt.Errorf("must name one of the demand's %d limits, got %d", len(r.Demand.Limits), i)}
	}
	if a := r.Demand.Limits[i].Limit.Algorithm; a != SlidingLog {
		return &FieldError{Field: fmt.Sprintf("Limits[%d].Algorithm", i), Err: fmt.Errorf("must be SlidingLog to shorten its entry, got %v", a)}
	}
	return nil
}
