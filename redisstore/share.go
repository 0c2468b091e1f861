package redisstore

import (
	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// This file holds the Go side of lent headrooms and fair shares
// (quota.Bucket.Classed, Headroom and Tenant): take.lua decides them with
// share.lua, and take_share.lua the common demand with a tenant; their
// keys and arguments are built here.

// sharedLimits returns how many limits of d are shared among tenants or
// have noted classes (quota.Bucket.Noted): share.lua's entries.
func sharedLimits(d *quota.Demand) int {
	n := 0
	for i := range d.Limits {
		if d.Limits[i].Tenant != "" || d.Limits[i].Noted() {
			n++
		}
	}
	return n
}

// shareFast reports whether take_share.lua decides d: one or two GCRA
// limits of whole microseconds, one of them shared among tenants, at most
// one pause key, and no reply to remember (replayMS == 0, checked by the
// caller). Every other demand with a tenant goes to take.lua.
func shareFast(d *quota.Demand) bool {
	if len(d.Limits) > 2 || len(d.Pauses) > 1 {
		return false
	}
	shared := 0
	for i := range d.Limits {
		b := &d.Limits[i]
		if l := quotamath.Of(b.Limit); b.Limit.Algorithm != quota.GCRA || !l.Exact() {
			return false
		}
		if b.Tenant != "" {
			shared++
		}
	}
	return shared == 1
}

// appendShare appends take_share.lua's keys and arguments for d's shared
// limit (shareFast): its keys shares, claims and ends, and share.lua's
// first seven arguments of an entry.
func (s *Store) appendShare(keys []string, args []any, d *quota.Demand) ([]string, []any) {
	i := 0
	for d.Limits[i].Tenant == "" {
		i++
	}
	b, ks, l := &d.Limits[i], s.keysOf(d.Scope), quotamath.Of(d.Limits[i].Limit)
	keys = append(keys, ks.shares(b), ks.shareClaims(b), ks.shareEnds(b))
	args = append(args, i+1, b.Tenant, l.ShareUnit(int64(d.CostOf(i))), l.ShareAhead(), l.Per, l.ShareUnit(1), max(d.MaxWait, 0).Microseconds())
	return keys, args
}

// appendNote appends take_window.lua's key and arguments for the class
// of b, a noted window limit of a demand of scope: the notes' key, the
// headroom and T.
func (s *Store) appendNote(keys []string, args []any, b *quota.Bucket, scope string) ([]string, []any) {
	l := quotamath.Of(b.Limit)
	return append(keys, s.keysOf(scope).classNotes(b)), append(args, b.Headroom, l.ShareUnit(1))
}

// appendShares appends share.lua's four keys and eight arguments per
// entry of d (sharedLimits), in the order of the limits.
func (s *Store) appendShares(keys []string, args []any, d *quota.Demand) ([]string, []any) {
	ks := s.keysOf(d.Scope)
	wait := max(d.MaxWait, 0).Microseconds()
	for i := range d.Limits {
		b := &d.Limits[i]
		if b.Tenant == "" && !b.Noted() {
			continue
		}
		l := quotamath.Of(b.Limit)
		note := -1
		if b.Noted() {
			note = b.Headroom
		}
		keys = append(keys, ks.shares(b), ks.shareClaims(b), ks.shareEnds(b), ks.classNotes(b))
		args = append(args, i+1, b.Tenant, l.ShareUnit(int64(d.CostOf(i))), l.ShareAhead(), l.Per, l.ShareUnit(1), wait, note)
	}
	return keys, args
}

// shares, shareClaims and shareEnds are the keys of b's fair share
// (keys.go): its state (active tenants, share clocks and marks; see
// share.lua), and its claims by place and by end; classNotes holds the
// notes of its classes.
func (k keys) shares(b *quota.Bucket) string {
	return k.base + "z" + algTag(&b.Limit) + b.Limit.Name + ":" + b.Key
}

func (k keys) shareClaims(b *quota.Bucket) string {
	return k.base + "k" + algTag(&b.Limit) + b.Limit.Name + ":" + b.Key
}

func (k keys) shareEnds(b *quota.Bucket) string {
	return k.base + "e" + algTag(&b.Limit) + b.Limit.Name + ":" + b.Key
}

func (k keys) classNotes(b *quota.Bucket) string {
	return k.base + "h" + algTag(&b.Limit) + b.Limit.Name + ":" + b.Key
}
