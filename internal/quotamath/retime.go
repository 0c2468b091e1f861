package quotamath

// GCRAKeeps reports whether a GCRA charge of cost, whose mark is mark
// ([Limit.Mark] of the arrival time it set), still counts where a request
// acted on at now is counted ([quota.Retimer]): the arrival time before
// the charge, mark less cost*T, is at or after now, so the bucket had no
// time to drain between the charge and now. The mark is the arrival time
// rounded up to the nanosecond, so the comparison takes it one
// nanosecond lower, and cost*T rounded up: never true when it should not
// be.
func (l *Limit) GCRAKeeps(mark, now, cost int64) bool {
	return mark-1-l.Mark(l.Emissions(cost)) >= now*1000
}
