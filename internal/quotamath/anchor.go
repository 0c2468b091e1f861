package quotamath

import (
	"cmp"
	"slices"

	"github.com/quotakit/throttle/quota"
)

// A WindowCount is one window of a window counter: its index k, the cost
// charged to it, and Last, the latest instant at which a unit charged to
// it may be sent. Units granted at once were sent at or before the
// decision's now, so a store may keep only the reservations' instants
// there (and the Sync fillers' of later windows): only max(now, Last)
// is ever read.
type WindowCount struct {
	K, Count, Last int64
}

// AnchorMoves reports whether a window ending at end (an instant) is
// further than tol from every boundary of l's windows: whether the
// distance between end and the phase, modulo P, exceeds tol either way.
func (l *Limit) AnchorMoves(end, tol int64) bool {
	d := FloorMod(end-l.Phase, l.Per)
	return min(d, l.Per-d) > tol
}

// Ends returns the time from now until the window that holds now ends.
func (l *Limit) Ends(now int64) int64 { return l.Start(l.Window(now)+1) - now }

// Reanchor moves the windows ws of a counter of l (on l's phase) to the
// windows of phase, at now, and returns them in order of index. The units
// of an old window k lie in [Start(k), min(Start(k+1)-1, max(now,
// Last))]: not before it starts, not after it ends, and not after now
// unless a reservation (or filler) said later. Each is counted in every
// new window that meets that span, so no new window counts fewer units
// than were or will be sent inside it (the never-over-admit rule of
// [quota.Anchorer]); a new window's Last is the latest instant of the
// spans it took. New windows that can no longer matter at now are left
// out: those before the one that holds now (and before its previous, for
// a sliding window, which weighs it).
func (l *Limit) Reanchor(ws []WindowCount, phase, now int64) []WindowCount {
	m := l.WithPhase(phase)
	keep := m.Window(now)
	if l.Algorithm == quota.SlidingWindow {
		keep--
	}
	var out []WindowCount
	for _, w := range ws {
		if w.Count <= 0 {
			continue
		}
		lo := l.Start(w.K)
		hi := min(l.Start(w.K+1)-1, max(now, w.Last, lo))
		for k := max(m.Window(lo), keep); k <= m.Window(hi); k++ {
			last := min(hi, m.Start(k+1)-1)
			i, found := slices.BinarySearchFunc(out, k, func(c WindowCount, k int64) int { return cmp.Compare(c.K, k) })
			if found {
				out[i].Count += w.Count
				out[i].Last = max(out[i].Last, last)
			} else {
				out = slices.Insert(out, i, WindowCount{K: k, Count: w.Count, Last: last})
			}
		}
	}
	return out
}

// SyncWindows returns the windows that a sync at now, of left units
// within the next within microseconds (within > 0), raises (see
// [quota.Syncer]): from first, the window that holds now, to last, the
// last window that starts before now+within. The count of last must
// reach R-left, and those before it must be full.
func (l *Limit) SyncWindows(now, within int64) (first, last int64) {
	return l.Window(now), l.Window(now + within - 1)
}
