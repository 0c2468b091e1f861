package redisstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/quotakit/throttle/quota"
)

// This file batches demands with a tenant (take_share.lua's: one or two
// GCRA limits of whole microseconds, one of them shared among tenants, at
// most one pause key) as batch.go batches plain ones: they wait in their
// scope's queue while shareBatchInFlight calls of it are in flight, and
// a flush decides them in one call of take_share_batch.lua, each as
// take_share.lua would have at the same instant.

// shareBatchInFlight is [BatchInFlight] for demands with a tenant: their
// lone call (take_share.lua) costs Redis 115.3k instructions against a
// plain one's 53.0k, and two of them in a batch 90.3k each, so they wait
// to go together from 2 calls of their scope in flight.
const shareBatchInFlight = 2

// shareInFlight is how many calls of a scope may be in flight before a
// demand with a tenant waits: shareBatchInFlight, or the store's
// batchInFlight when lower (tests).
func (s *Store) shareInFlight() int { return min(s.batchInFlight, shareBatchInFlight) }

// shareBatched reports whether Take batches d: take_share.lua decides it
// (shareFast) and the store batches and remembers no reply.
func (s *Store) shareBatched(d *quota.Demand) bool {
	return s.batchMax > 1 && s.replayMS == 0 && !s.generic && shareFast(d)
}

// splitShared returns calls without the demands with a tenant, and those
// demands apart (both in their order), or calls and nil, allocating
// nothing, when there are none.
func splitShared(calls []*batchCall) (plain, shared []*batchCall) {
	first := -1
	for i, c := range calls {
		if c.d.Shared() {
			first = i
			break
		}
	}
	if first < 0 {
		return calls, nil
	}
	plain = make([]*batchCall, 0, len(calls))
	plain = append(plain, calls[:first]...)
	for _, c := range calls[first:] {
		if c.d.Shared() {
			shared = append(shared, c)
		} else {
			plain = append(plain, c)
		}
	}
	return plain, shared
}

// decideShareBatch decides calls, demands with a tenant of one scope
// (shareFast), in one round trip: take_share_batch.lua, or take_share.lua
// for a lone one; and sets each one's result.
func (s *Store) decideShareBatch(ctx context.Context, calls []*batchCall) {
	if len(calls) == 1 {
		c := calls[0]
		c.dec, c.err = s.take(ctx, c.d, false, false)
		return
	}
	nk, na := 0, 1
	for _, c := range calls {
		nk += len(c.d.Pauses) + len(c.d.Limits) + 3
		na += 10 + 2*len(c.d.Limits)
	}
	keys := make([]string, 0, nk)
	args, mark := s.scriptArgs(na, "", true)
	// The number of demands, negative when all are alike and only the
	// first is sent (take_share_batch.lua).
	same := allAlike(calls)
	args = append(args, countArg(len(calls), same))
	var prev *quota.Demand
	for _, c := range calls {
		d := c.d
		if prev != nil {
			if alike(d, prev) {
				if !same {
					args = append(args, sameDemand)
				}
				continue
			}
			if tenant, ok := otherTenant(d, prev); ok {
				args = append(args, "="+tenant)
				prev = d
				continue
			}
		}
		keys = append(keys, s.takeKeys(d, "")...)
		args = appendGCRAPairs(append(args, len(d.Pauses), len(d.Limits), demandMaxWait(d)), d)
		keys, args = s.appendShare(keys, args, d)
		prev = d
	}
	res, err := s.run(ctx, takeShareBatchScript, mark, keys, args...).Slice()
	var now int64
	if err == nil {
		var ok bool
		if len(res) != len(calls)+1 {
			err = fmt.Errorf("malformed reply: %d entries for %d demands", len(res)-1, len(calls))
		} else if now, ok = res[0].(int64); !ok {
			err = fmt.Errorf("malformed reply: clock %v", res[0])
		}
	}
	if err != nil {
		s.reload.note(err)
		err = fmt.Errorf("redisstore: take: %w", s.configErr(resent(err)))
		for _, c := range calls {
			c.err = err
		}
		return
	}
	// The clock, then an entry per demand: take_share.lua's reply, or a
	// one-limit grant at the clock's arrival time (parseBatchEntry).
	for i, c := range calls {
		c.dec, _, c.err = parseBatchEntry(res, i+1, now, c, "")
		c.dec, c.err = s.identify(c.dec, c.err)
	}
}

// otherTenant reports whether demand d is prev but for the tenant of its
// shared limit, and returns d's tenant: take_share_batch.lua's "=" and a
// tenant.
func otherTenant(d, prev *quota.Demand) (string, bool) {
	if d.Scope != prev.Scope || d.Cost != prev.Cost || d.MaxWait != prev.MaxWait ||
		len(d.Limits) != len(prev.Limits) || !slices.Equal(d.Pauses, prev.Pauses) {
		return "", false
	}
	tenant := ""
	for i := range d.Limits {
		a, b := d.Limits[i], prev.Limits[i]
		if (a.Tenant == "") != (b.Tenant == "") {
			return "", false
		}
		if a.Tenant != "" {
			tenant = a.Tenant
		}
		a.Tenant, b.Tenant = "", ""
		if a != b {
			return "", false
		}
	}
	return tenant, tenant != ""
}
