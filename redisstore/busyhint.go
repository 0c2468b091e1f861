package redisstore

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle/quota"
)

// busyHints remember, per GCRA key this Store decided alone last, until
// when (on the local clock) its bucket was busy: its arrival time (TAT)
// ahead of Redis's clock. take_gcra.lua decides a demand of one such
// limit either way; told that the bucket is busy and the demand will be
// granted, it charges the key first, so that the grant is one command
// (an INCRBY) instead of a read and a write, and otherwise it reads
// first, so that an idle bucket's grant and a refusal write no more than
// they need (a write is propagated to replicas). A hint is only ever a
// guess of which order costs Redis less: a wrong one costs a command
// (BENCHMARKS.md, "A busy bucket's grant in one command"), never a
// decision.
//
// Other instances only move a TAT later (cancels and settles aside), so
// a bucket seen busy until t is busy until t at least; one seen idle may
// have become busy meanwhile, and is then read first, as without hints.
//
// The hints are a fixed table of busySlots entries indexed by the key's
// hash: no allocation, nothing to expire; keys that collide take turns.
// Entries are read and written with atomics, each word on its own: a
// torn entry is a wrong guess at worst.
type busyHints struct {
	seed  maphash.Seed
	slots [busySlots]busySlot
}

type busySlot struct {
	key  atomic.Uint64 // the key's hash
	busy atomic.Int64  // local Unix ns until which its bucket is busy
}

// busySlots is the size of a Store's hint table (16 KiB).
const busySlots = 1024

func newBusyHints() *busyHints { return &busyHints{seed: maphash.MakeSeed()} }

// hash is key's hash, which names its entry.
func (h *busyHints) hash(key string) uint64 { return maphash.String(h.seed, key) }

// chargeFirst reports whether take_gcra.lua should charge the key of hash
// first for a demand with the given allowance (Burst·T less its charge)
// and MaxWait, decided now: its bucket was busy until after now, and not
// so far after that the demand would wait longer than maxWait.
func (h *busyHints) chargeFirst(hash uint64, now time.Time, allowance, maxWait time.Duration) bool {
	s := &h.slots[hash%busySlots]
	if s.key.Load() != hash {
		return false
	}
	busy, at := s.busy.Load(), now.UnixNano()
	return busy > at && busy-int64(allowance) <= at+int64(maxWait)
}

// note records what dec, a decision on the key of hash (the demand's
// only limit), made at the local instant now, says of the bucket: a
// grant's TAT, or a refusal by the limit, whose delay ends allowance
// before the TAT.
func (h *busyHints) note(hash uint64, now time.Time, dec quota.Decision, allowance time.Duration) {
	var ahead time.Duration // the TAT less Redis's clock
	switch {
	case dec.OK && dec.Reservation != nil && len(dec.Reservation.Marks) == 1 && !dec.At.IsZero():
		ahead = time.Duration(dec.Reservation.Marks[0] - dec.At.UnixNano()) // Marks: ns (quotamath's Mark)
	case !dec.OK && dec.Limit == 0:
		ahead = dec.Delay + allowance
	default:
		return
	}
	s := &h.slots[hash%busySlots]
	s.key.Store(hash)
	s.busy.Store(now.UnixNano() + int64(ahead))
}

// hinted is a demand whose order take_gcra.lua takes from the hints: its
// limit key's hash (busyHints.hash, taken once for the order and the
// note), and its allowance (Burst·T less its charge).
type hinted struct {
	hash      uint64
	allowance time.Duration
}

// chargeFirst reports whether take_gcra.lua charges h's key first for a
// demand that may wait maxWait µs: as the hints say, or as a test set.
func (s *Store) chargeFirst(h *hinted, maxWait int64) bool {
	if s.chargeOrder != 0 {
		return s.chargeOrder > 0
	}
	return s.hints.chargeFirst(h.hash, time.Now(), h.allowance, time.Duration(maxWait)*time.Microsecond)
}
