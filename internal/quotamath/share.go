package quotamath

import "github.com/quotakit/throttle/quota"

// Less returns l with h units of its capacity held back, as a demand with
// [quota.Bucket.Headroom] h sees it: GCRA's Burst, or the Rate of the
// window algorithms (the slots of a Concurrency limit), less h. The
// emission interval T stays that of l. h is at most what
// [quota.Demand.Validate] allows.
func (l Limit) Less(h int64) Limit {
	if h <= 0 {
		return l
	}
	if l.Algorithm == quota.GCRA {
		l.Burst -= h
	} else {
		l.Rate -= h
	}
	return l
}

// Capacity returns C, the most the limit admits at once: Burst for GCRA,
// Rate (slots) otherwise.
func (l Limit) Capacity() int64 {
	if l.Algorithm == quota.GCRA {
		return l.Burst
	}
	return l.Rate
}

// MaxShareStep bounds the step c*n*T of a share clock (2^50 µs, about 35
// years), so that clocks stay exact in Lua's doubles however many
// tenants are active.
const MaxShareStep = 1 << 50

// ShareAhead returns C*T: how far a tenant's share clock may run ahead of
// now while the tenant is within its share (quota.Store, Fair shares).
func (l Limit) ShareAhead() int64 { return l.Capacity() * l.Emission() }

// OverShare reports whether a tenant whose share clock is clock is over
// its share at now: clock >= now + C*T.
func (l Limit) OverShare(clock, now int64) bool { return clock >= now+l.ShareAhead() }

// BackInShare returns the first instant at which a tenant whose share
// clock is clock is within its share again: clock - C*T + 1.
func (l Limit) BackInShare(clock int64) int64 { return clock - l.ShareAhead() + 1 }

// ShareCharge returns a tenant's share clock after a grant of cost at the
// instant t, n tenants being active: min(max(clock, t), t + C*T) +
// min(cost*n*T, MaxShareStep).
func (l Limit) ShareCharge(clock, t, cost, n int64) int64 {
	step := int64(MaxShareStep)
	if u := cost * l.Emission(); u <= MaxShareStep/n {
		step = min(u*n, MaxShareStep)
	}
	return min(max(clock, t), t+l.ShareAhead()) + step
}

// ClaimEnd returns the instant until which a tenant refused until the
// instant at holds its claim: at + T.
func (l Limit) ClaimEnd(at int64) int64 { return at + l.Emission() }
