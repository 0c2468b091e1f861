package quotamath

import (
	"slices"

	"github.com/quotakit/throttle/quota"
)

// SlotFreeAt reports whether a Concurrency limit whose live leases expire
// at expiries (all after now) has no free slot, and if so the instant at
// which expiries alone free one: with n >= R leases, the (n-R+1)th
// smallest expiry. It sorts expiries.
func (l *Limit) SlotFreeAt(expiries []int64) (at int64, full bool) {
	n := int64(len(expiries))
	if n < l.Rate {
		return 0, false
	}
	slices.Sort(expiries)
	return expiries[n-l.Rate], true
}

// concurrencyState returns Used, Remaining and Reset of a Concurrency
// limit at now, given the expiries of its leases: Used counts those after
// now, Reset is the time until the last of them. Other fields are left
// zero.
func (l *Limit) concurrencyState(expiries []int64, now int64) quota.LimitState {
	var st quota.LimitState
	var last int64
	for _, exp := range expiries {
		if exp > now {
			st.Used++
			last = max(last, exp)
		}
	}
	if st.Used > 0 {
		st.Reset = Micros(last - now)
	}
	st.Remaining = max(l.Rate-st.Used, 0)
	return st
}
