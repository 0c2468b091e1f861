package quotamath

import "math/bits"

// A Time is a GCRA arrival time, or a span of emission intervals, kept
// exactly: Micros microseconds plus Frac/R of one, R the limit's Rate, with
// 0 <= Frac < R. The emission interval T = P/R is seldom a whole number of
// microseconds (10^7 a second is 0.1 µs, 10^9 per 31 days 2678.4 µs);
// with the remainder in units of 1/R, n intervals are exactly
// floor(n*P/R) µs and (n*P mod R)/R ([Limit.Emissions]), and every charge
// and refund is exact. The zero Time is the instant 0.
type Time struct {
	Micros int64
	Frac   int64 // in units of 1/R µs, 0 <= Frac < R
}

// At returns the whole microsecond t as a Time.
func At(t int64) Time { return Time{Micros: t} }

// Ceil returns the first whole microsecond not before t.
func (t Time) Ceil() int64 {
	if t.Frac > 0 {
		return t.Micros + 1
	}
	return t.Micros
}

// Before reports whether t is earlier than u.
func (t Time) Before(u Time) bool {
	return t.Micros < u.Micros || t.Micros == u.Micros && t.Frac < u.Frac
}

// Emissions returns n emission intervals, n*P/R: the quotient of n*P by R
// in microseconds and its remainder as the fraction, computed in 128 bits
// (n*P passes 2^63 for large quotas: 10^9 per 31 days is 2.7*10^21 µs at
// n = R). A negative n gives the negative span. The quotient fits when
// |n| is at most the limit's Burst ([quota.Limit.Validate] keeps
// Burst*P/R within quota.MaxPer); a larger one saturates.
func (l *Limit) Emissions(n int64) Time {
	if n < 0 {
		return l.sub(Time{}, l.Emissions(-n))
	}
	hi, lo := bits.Mul64(uint64(n), uint64(l.Per))
	if hi >= uint64(l.Rate) {
		return Time{Micros: 1<<63 - 1}
	}
	q, r := bits.Div64(hi, lo, uint64(l.Rate))
	if q >= 1<<63 {
		return Time{Micros: 1<<63 - 1}
	}
	return Time{Micros: int64(q), Frac: int64(r)}
}

// add returns t + u.
func (l *Limit) add(t, u Time) Time {
	s := Time{Micros: t.Micros + u.Micros, Frac: t.Frac + u.Frac}
	if s.Frac >= l.Rate {
		s.Micros++
		s.Frac -= l.Rate
	}
	return s
}

// sub returns t - u.
func (l *Limit) sub(t, u Time) Time {
	d := Time{Micros: t.Micros - u.Micros, Frac: t.Frac - u.Frac}
	if d.Frac < 0 {
		d.Micros--
		d.Frac += l.Rate
	}
	return d
}

// intervals returns how many emission intervals d (not negative) spans,
// rounded up: ceil((d.Micros*R + d.Frac) / P), in 128 bits, or most if that
// is more.
func (l *Limit) intervals(d Time, most int64) int64 {
	hi, lo := bits.Mul64(uint64(d.Micros), uint64(l.Rate))
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(d.Frac)+uint64(l.Per-1), 0)
	hi += carry
	if hi >= uint64(l.Per) {
		return most
	}
	q, _ := bits.Div64(hi, lo, uint64(l.Per))
	if q > uint64(most) {
		return most
	}
	return int64(q)
}

// Mark returns what a store records of the GCRA charge that set the
// arrival time tat, to tell later whether the bucket still holds it
// ([Limit.GCRARefund]): tat in whole nanoseconds, rounded up,
// tat.Micros*1000 + ceil(1000*tat.Frac/R). A later grant moves the
// arrival time by at least c*T >= 1 ns ([quota.Limit.Validate] keeps a
// rate to one unit per nanosecond) or past a whole microsecond, so it
// always changes the mark; and ceil(mark/1000) is ceil(tat).
func (l *Limit) Mark(tat Time) int64 {
	return tat.Micros*1000 + CeilDiv(tat.Frac*1000, l.Rate)
}
