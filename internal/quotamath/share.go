package quotamath

import "github.com/quotakit/throttle/quota"

// Less returns l with h units of its capacity held back, as a demand with
// [quota.Bucket.Headroom] h sees it: GCRA's Burst, or the Rate of the
// window algorithms (the slots of a Concurrency limit), less h. The
// emission interval T stays that of l, and so do a sliding window's
// weight steps (FullRate keeps its Rate). h is at most what
// [quota.Demand.Validate] allows.
func (l Limit) Less(h int64) Limit {
	if h <= 0 {
		return l
	}
	if l.Algorithm == quota.GCRA {
		l.Burst -= h
	} else {
		if l.FullRate == 0 {
			l.FullRate = l.Rate
		}
		l.Rate -= h
	}
	return l
}

// Capacity returns C, the most the limit admits at once: Burst for GCRA,
// Rate (slots) otherwise.
func (l *Limit) Capacity() int64 {
	if l.Algorithm == quota.GCRA {
		return l.Burst
	}
	return l.Rate
}

// MaxShareStep bounds the step c*n*T of a share clock (2^50 µs, about 35
// years), so that clocks stay exact in Lua's doubles however many
// tenants are active.
const MaxShareStep = 1 << 50

// ShareUnit returns c*T rounded up to the microsecond: share clocks are
// whole microseconds, and each amount of them is taken exactly
// ([Limit.Emissions]) and rounded up once, so a clock never runs slow.
// (At rates above a unit per microsecond a grant of a few units moves
// its tenant's clock by up to n µs more than c*n*T.)
func (l *Limit) ShareUnit(cost int64) int64 { return l.Emissions(cost).Ceil() }

// ShareAhead returns C*T, rounded up: how far beyond a grant's instant a
// tenant's share clock may be before the grant's step (quota.Store, Fair
// shares).
func (l *Limit) ShareAhead() int64 { return l.ShareUnit(l.Capacity()) }

// SharePlace returns the place of a demand whose tenant's share clock is
// clock, at now: max(clock, now). Of the tenants waiting on a counter,
// the one with the lowest place goes first (quota.Store, Fair shares).
func SharePlace(clock, now int64) int64 { return max(clock, now) }

// ShareCharge returns a tenant's share clock after a grant of cost at the
// instant t, n tenants being active: min(max(clock, t), t + C*T) +
// min(c*T*n, MaxShareStep), c*T rounded up ([Limit.ShareUnit]).
func (l *Limit) ShareCharge(clock, t, cost, n int64) int64 {
	step := int64(MaxShareStep)
	if u := l.ShareUnit(cost); u <= MaxShareStep/n {
		step = min(u*n, MaxShareStep)
	}
	return min(max(clock, t), t+l.ShareAhead()) + step
}

// ClaimGrace is how long at least a claim outlives its instant, µs: its
// holder, told to come back then, may come back late by a store round
// trip and a loaded machine's scheduling.
const ClaimGrace = 250_000

// ClaimEnd returns the instant until which a tenant refused until the
// instant at holds its claim: at + max(T, ClaimGrace), T rounded up.
func (l *Limit) ClaimEnd(at int64) int64 { return at + max(l.ShareUnit(1), ClaimGrace) }

// HeldUntil returns the instant until which a demand that live claims at a
// lower place hold back is refused, last being the latest of their
// instants: T after it, or after now if that is later (its holder is
// late), T rounded up.
func (l *Limit) HeldUntil(last, now int64) int64 { return max(last, now) + l.ShareUnit(1) }

// NoteActive reports whether a class last noted on the counter at the
// instant at is active at now: at > now - T, T rounded up (quota.Store,
// Lent headroom).
func (l *Limit) NoteActive(at, now int64) bool { return at > now-l.ShareUnit(1) }

// NoteEnd returns the instant at which a class last noted at the instant
// at stops being active: at + T, rounded up.
func (l *Limit) NoteEnd(at int64) int64 { return at + l.ShareUnit(1) }

// RestrictedWait returns, in µs, how far ahead of now a restricted demand
// ([quota.Demand.Restricted]) may be granted as a reservation: half the
// least emission interval T of its limits other than Concurrency (T
// rounded up, then its half); 0 if it has none (quota.Store, Headroom and
// fair shares).
func RestrictedWait(d *quota.Demand) int64 {
	least := int64(-1)
	for i := range d.Limits {
		if l := &d.Limits[i].Limit; l.Algorithm != quota.Concurrency {
			ql := Of(*l)
			if t := (ql.ShareUnit(1) + 1) / 2; least < 0 || t < least {
				least = t
			}
		}
	}
	return max(least, 0)
}
