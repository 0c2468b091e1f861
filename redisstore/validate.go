package redisstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/quotakit/throttle"
)

// maxUnits bounds Per (µs) times max(Rate, Burst), so the scripts'
// arithmetic in Lua's doubles is exact. It matches the root package.
const maxUnits = 1 << 53

// checkDemand rejects a demand no limit could ever grant, with the same
// errors as the in-process store, before anything is sent to Redis.
func checkDemand(d *throttle.Demand) error {
	if d == nil {
		return errors.New("redisstore: nil demand")
	}
	if d.Cost < 1 {
		return fmt.Errorf("redisstore: demand cost must be at least 1, got %d", d.Cost)
	}
	for i := range d.Limits {
		l := d.Limits[i].Limit
		if field, err := validateLimit(l); err != nil {
			return &throttle.PolicyError{Field: fmt.Sprintf("Limits[%d].%s", i, field), Err: err}
		}
		if j := d.SameCounter(i); j >= 0 {
			return &throttle.PolicyError{Field: fmt.Sprintf("Limits[%d]", i), Err: fmt.Errorf("same counter as Limits[%d] (limit %s, same key): a demand charges each counter once", j, l.Name)}
		}
		capacity := l.Rate
		switch l.Algorithm {
		case throttle.GCRA:
			capacity = burst(l)
		case throttle.Concurrency:
			continue // one slot per demand, whatever the cost
		}
		if d.Cost > capacity {
			return fmt.Errorf("redisstore: %w: limit %s admits at most %d at once, demand costs %d", throttle.ErrCostTooHigh, l.Name, capacity, d.Cost)
		}
	}
	return nil
}

func burst(l throttle.Limit) int {
	if l.Burst == 0 {
		return l.Rate
	}
	return l.Burst
}

// validateLimit mirrors the root package's checks of a limit's fields.
func validateLimit(l throttle.Limit) (field string, err error) {
	switch {
	case l.Name == "":
		return "Name", errors.New("must not be empty")
	case !validName(l.Name):
		return "Name", fmt.Errorf("%q must use only letters, digits and ._-", l.Name)
	case l.Rate <= 0:
		return "Rate", fmt.Errorf("must be positive, got %d", l.Rate)
	case l.Per < time.Microsecond:
		return "Per", fmt.Errorf("must be at least 1µs, got %v", l.Per)
	case l.Burst < 0:
		return "Burst", fmt.Errorf("must not be negative, got %d", l.Burst)
	case l.Algorithm < throttle.GCRA || l.Algorithm > throttle.Concurrency:
		return "Algorithm", fmt.Errorf("unknown algorithm %v", l.Algorithm)
	case l.Algorithm == throttle.Concurrency && l.Burst != 0:
		return "Burst", errors.New("a concurrency limit has no burst: Rate is the number of slots")
	case l.Algorithm == throttle.Concurrency && l.Per < throttle.MinLease:
		return "Per", fmt.Errorf("is the lease time of a concurrency limit and must be at least %v, got %v", throttle.MinLease, l.Per)
	case l.Algorithm != throttle.GCRA && l.Burst != 0 && l.Burst != l.Rate:
		return "Burst", fmt.Errorf("only GCRA has a burst; %v admits Rate per window", l.Algorithm)
	}
	units := max(l.Rate, burst(l))
	if int64(units) > maxUnits/l.Per.Microseconds() {
		return "Rate", fmt.Errorf("%d per %v is too large to count exactly", units, l.Per)
	}
	return "", nil
}

// validName reports whether s is a usable limit name: it is part of a key,
// and must not contain ':' (which ends it there).
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
