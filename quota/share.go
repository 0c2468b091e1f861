package quota

import (
	"errors"
	"fmt"
)

// checkShare checks the Headroom and Tenant of the demand's limit i,
// whose other fields are valid: a headroom is not negative and leaves
// room for the cost; a Concurrency limit has no tenants.
func (d *Demand) checkShare(i int) error {
	b := &d.Limits[i]
	if b.Headroom < 0 {
		return &FieldError{Field: fmt.Sprintf("Limits[%d].Headroom", i), Err: fmt.Errorf("must not be negative, got %d", b.Headroom)}
	}
	if b.Tenant != "" && b.Limit.Algorithm == Concurrency {
		return &FieldError{Field: fmt.Sprintf("Limits[%d].Tenant", i), Err: errors.New("a concurrency limit cannot be shared among tenants")}
	}
	if b.Headroom == 0 {
		return nil
	}
	capacity, cost := b.Limit.Capacity(), d.CostOf(i)
	if b.Limit.Algorithm == Concurrency {
		capacity, cost = b.Limit.Rate, 1
	}
	if cost > capacity-b.Headroom {
		return fmt.Errorf("%w: limit %s admits at most %d at once with a headroom of %d, demand costs %d",
			ErrCostTooHigh, b.Limit.Name, max(capacity-b.Headroom, 0), b.Headroom, cost)
	}
	return nil
}

// Restricted reports whether the demand has a headroom or a tenant on
// any limit, and so is granted as a reservation only for an instant at
// most half an emission interval ahead (see [Store]).
func (d *Demand) Restricted() bool {
	for i := range d.Limits {
		if d.Limits[i].Headroom > 0 || d.Limits[i].Tenant != "" {
			return true
		}
	}
	return false
}

// Noted reports whether a store notes the demand's class on b's counter
// and may lend b's headroom (see [Store], Lent headroom): b is a
// FixedWindow, SlidingWindow or SlidingLog limit with a Headroom or
// Classed.
func (b *Bucket) Noted() bool {
	switch b.Limit.Algorithm {
	case FixedWindow, SlidingWindow, SlidingLog:
		return b.Headroom > 0 || b.Classed
	}
	return false
}

// Noted reports whether any limit of the demand is noted ([Bucket.Noted]).
func (d *Demand) Noted() bool {
	for i := range d.Limits {
		if d.Limits[i].Noted() {
			return true
		}
	}
	return false
}

// Shared reports whether any limit of the demand is shared among tenants
// (a Bucket with a Tenant).
func (d *Demand) Shared() bool {
	for i := range d.Limits {
		if d.Limits[i].Tenant != "" {
			return true
		}
	}
	return false
}
