package throttle

import (
	"fmt"
	"net/http"
	"slices"
)

// buckets fills in d's limits for req: every limit of r that applies to
// req ([Limit].Match), with its key and its cost, and d's own cost (the
// caller's, or the rule's), checked against every limit's capacity.
func (r *rule) buckets(req *http.Request, d *demand) error {
	switch {
	case d.cost != 0:
		d.Cost = d.cost
	case r.Cost != nil:
		d.Cost = r.Cost(req)
	}
	if d.Cost < 1 {
		return fmt.Errorf("throttle: rule %s: %w: cost must be at least 1, got %d", r.id, ErrInvalidPolicy, d.Cost)
	}
	for j := range r.Limits {
		l := &r.Limits[j]
		if l.Match != nil && !l.Match(req) {
			if d.rules == nil {
				// From here on the demand's indexes are not the rule's.
				d.rules = make([]int, len(d.Limits), len(r.Limits))
				for i := range d.rules {
					d.rules[i] = i
				}
			}
			continue
		}
		b := d.class.bucket(r.limits[j]) // class.go
		if l.Key != nil {
			k, err := l.Key(req)
			if err != nil {
				return errKeyFunc(r.id, l.Name, err)
			}
			b.Key = escapeKey(k)
		}
		if l.Tenant != nil {
			k, err := l.Tenant(req)
			if err != nil {
				return errKeyFunc(r.id, l.Name, err)
			}
			b.Tenant = tenantKey(k)
		}
		cost := d.Cost
		if l.Cost != nil {
			if b.Cost = l.Cost(req); b.Cost < 1 {
				return fmt.Errorf("throttle: rule %s: %w: limit %s: cost must be at least 1, got %d", r.id, ErrInvalidPolicy, l.Name, b.Cost)
			}
			cost = b.Cost
		}
		if c := b.Limit.Capacity(); cost > c {
			return fmt.Errorf("throttle: rule %s: %w: limit %s admits at most %d at once, request costs %d", r.id, ErrCostTooHigh, l.Name, c, cost)
		}
		if c := b.Limit.Capacity() - b.Headroom; b.Headroom > 0 && b.Limit.Algorithm != Concurrency && cost > c {
			return fmt.Errorf("throttle: rule %s: %w: limit %s admits at most %d at once for class %s, request costs %d", r.id, ErrCostTooHigh, l.Name, c, d.class.name, cost)
		}
		if d.rules != nil {
			d.rules = append(d.rules, j)
		}
		d.Limits = append(d.Limits, b)
	}
	return nil
}

// tenantKey returns the store's name of tenant t: t escaped as keys are,
// and "%" for the empty tenant (a tenant too), which no escaped name is.
func tenantKey(t string) string {
	if t == "" {
		return "%"
	}
	return escapeKey(t)
}

// ruleLimit returns the index in the rule's Limits of d's limit i.
func (d *demand) ruleLimit(i int) int {
	if d.rules == nil {
		return i
	}
	return d.rules[i]
}

// limitOf returns the index in d.Limits of the rule's limit j, or -1 if
// that limit does not apply to d's request.
func (d *demand) limitOf(j int) int {
	if d.rules == nil {
		if j < len(d.Limits) {
			return j
		}
		return -1
	}
	return slices.Index(d.rules, j)
}
