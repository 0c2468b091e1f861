package redisstore

import (
	"strconv"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// This file holds the Go side of fair shares (quota.Bucket.Tenant):
// take.lua decides them with share.lua, whose keys and arguments are
// built here.

// sharedLimits returns how many limits of d are shared among tenants.
func sharedLimits(d *quota.Demand) int {
	n := 0
	for i := range d.Limits {
		if d.Limits[i].Tenant != "" {
			n++
		}
	}
	return n
}

// appendShares appends share.lua's three keys and seven arguments per
// limit of d shared among tenants, in the order of the limits.
func (s *Store) appendShares(keys []string, args []any, d *quota.Demand) ([]string, []any) {
	ks := newKeys(s.prefix, d.Scope)
	wait := max(d.MaxWait, 0).Microseconds()
	for i := range d.Limits {
		b := &d.Limits[i]
		if b.Tenant == "" {
			continue
		}
		l := quotamath.Of(b.Limit)
		t := l.Emission()
		keys = append(keys, ks.shareTenants(b), ks.shareClaims(b), ks.shareClock(b))
		args = append(args, i+1, b.Tenant, int64(d.CostOf(i))*t, l.ShareAhead(), l.Per, t, wait)
	}
	return keys, args
}

// shareTenants, shareClaims and shareClock are the keys of b's fair
// share (keys.go): its active tenants, its claims, and the share clock of
// b's tenant.
func (k keys) shareTenants(b *quota.Bucket) string {
	return k.base + "t" + algTag(b.Limit.Algorithm) + b.Limit.Name + ":" + b.Key
}

func (k keys) shareClaims(b *quota.Bucket) string {
	return k.base + "h" + algTag(b.Limit.Algorithm) + b.Limit.Name + ":" + b.Key
}

// shareClock puts the length of the key before it, so that no key and
// tenant pair reads as another.
func (k keys) shareClock(b *quota.Bucket) string {
	return k.base + "v" + algTag(b.Limit.Algorithm) + b.Limit.Name + ":" + strconv.Itoa(len(b.Key)) + ":" + b.Key + ":" + b.Tenant
}
