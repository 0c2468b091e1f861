package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle/quota"
)

// WithBatching sets how many demands of one scope may go together in one
// batch; a max below 2 turns batching off. Batching is on by default
// ([DefaultBatchMax]): while [BatchInFlight] decisions of a scope are in
// flight (one fewer once the scope's batches decide more than one demand
// each), later demands of that scope wait, and go together, up to max at
// a time, in one EVALSHA (take_batch.lua) that decides them in order of
// arrival at one instant of Redis's clock, each all-or-nothing as if it
// were its own call. Under heavy concurrency this saves Redis most of its
// work per decision (one read and one write per key for the whole batch,
// one round trip's system calls) at the price of waiting for a call of
// the scope to end; below that concurrency every demand goes alone, as
// with batching off. It applies to demands whose limits are all GCRA or
// Concurrency, and to demands of one or two GCRA limits one of which is
// shared among tenants (quota.Bucket.Tenant; take_share_batch.lua,
// which decides each as take_share.lua would), and not with
// [ReplayIDs]; other demands always go alone. A batch with Concurrency limits also
// carries the scope's released leases ([Store.Release]).
//
// A failed batch fails every demand in it with the same error, and a
// demand whose context ends while it waits unsent is never sent
// ([ErrNotSent]). A demand waiting, the one whose caller's deadline is
// the latest, sends the next batch from its caller's goroutine: that
// Take returns once the batch is decided or its deadline passes, as a
// lone call's does.
func WithBatching(max int) Option {
	return func(s *Store) { s.batchMax = max }
}

// DefaultBatchMax is the most demands one batch decides when [WithBatching]
// is not given.
const DefaultBatchMax = 64

// BatchInFlight is how many decisions of one scope a Store has in flight
// before later demands of the scope wait to go together in a batch (1
// for demands with a Concurrency limit, 2 for those with a tenant). Plain
// demands wait from one call fewer in flight while the scope's last batch
// decided more than one demand: a batch of one saves Redis nothing and
// costs its caller a wait, so at four callers of a scope all four go
// alone, and from five on fewer go alone than with four. Below it,
// batching costs nothing: every demand is its own call. A batch costs
// Redis a fraction of the calls it replaces (demands alike, with a pause
// key: 71k instructions for two, 97k for sixteen, against 51k for a call
// of its own; take_batch.lua decides them in straight lines), and the
// first demand waiting sends it from its own goroutine. On the
// development VM (2 CPUs, Redis beside 8 callers of one scope; the bench
// program, decisions per second over the 1-limit floor's in the same
// runs, 2026-11-27) four made 0.85-0.97 (mean 0.92 over 8 runs) on a
// quiet machine, three 0.77-0.95 (mean 0.87 over 10), eight (no batch at
// 8 callers) 0.91-0.95 (mean 0.93 over 5); beside two CPU burners four
// and three alike (0.93-1.12, 1.07), no batch 0.84-0.85. See
// BENCHMARKS.md ("Plain batches in straight lines").
const BatchInFlight = 4

// slotBatchInFlight is [BatchInFlight] for demands with Concurrency
// limits: their lone call costs Redis more than a plain one (about 113k
// instructions against 48k: ZREM and PUBLISH of the carried release,
// ZREMRANGEBYSCORE, ZCARD, ZADD and PEXPIRE besides the GCRA limit's
// commands), and each demand more in a batch of alike ones about 15k, so
// they wait to go together as soon as one call of their scope is in
// flight (and a flush yields for the callers it answered: Store.flush).
// In the bench program (Take, then Release; 2026-11-27, load average 7-8, as
// multiples of the EVALSHA baseline in the same runs) 1 with the yield
// made 0.75, 0.66 and 0.60 at 8 callers where 2 without it (the default
// before) made 0.68, 0.58 and 0.53, 2 with it 0.60, 0.46 and 0.48, and 1
// without it 0.54, 0.50 and 0.52; at 2, 4 and 16 callers 0.46, 0.55 and
// 1.00 against 0.30, 0.42 and 0.77.
const slotBatchInFlight = 1

// ErrNotSent wraps the context error of a batched demand whose context
// ended before its batch was sent: nothing was charged for it.
var ErrNotSent = errors.New("redisstore: not sent")

// batcher holds a queue per scope with a decision in flight.
type batcher struct {
	mu     sync.Mutex
	queues map[string]*batchQueue
	spare  *batchQueue // the last queue dropped idle, for the next scope: no allocation per call
}

// A batchQueue is one scope's calls in flight and demands waiting for
// one of them to end.
type batchQueue struct {
	inflight int
	pending  []*batchCall
	// company: the scope's last batch decided more than one demand, so
	// that plain demands wait from one call fewer in flight
	// (Store.inFlightLimit).
	company bool
}

// batchCall states.
const (
	callQueued int32 = iota
	callSent
	callAbandoned
	callLead // to lead its batch (Store.leader): done is closed at once, undecided
)

// A batchCall is one waiting demand and, once done is closed, its result.
type batchCall struct {
	d     *quota.Demand
	slots int   // d's Concurrency limits
	order []int // batchOrder(d)
	state atomic.Int32
	done  chan struct{}
	// deadline is its caller's, zero for none: a call that leads its
	// batch (Store.lead) bounds the batch's call by it
	deadline time.Time
	dec      quota.Decision
	err      error
}

// newBatchCall returns the call of d, a demand of GCRA and Concurrency
// limits; slots: d has Concurrency limits. A call that waits in a queue
// needs its done channel too.
func newBatchCall(d *quota.Demand, slots bool) *batchCall {
	c := &batchCall{d: d}
	if slots {
		for i := range d.Limits {
			if d.Limits[i].Limit.Algorithm == quota.Concurrency {
				c.slots++
			}
		}
		c.order = batchOrder(d)
	}
	return c
}

// batchOrder returns, for each place of take_batch.lua's order of d's
// limits (its GCRA limits, then its Concurrency limits), the index of
// that limit in d.Limits; nil when that is d's own order.
func batchOrder(d *quota.Demand) []int {
	slot, sorted := false, true
	for i := range d.Limits {
		if d.Limits[i].Limit.Algorithm == quota.Concurrency {
			slot = true
		} else if slot {
			sorted = false
		}
	}
	if sorted {
		return nil
	}
	order := make([]int, 0, len(d.Limits))
	for _, slots := range []bool{false, true} {
		for i := range d.Limits {
			if (d.Limits[i].Limit.Algorithm == quota.Concurrency) == slots {
				order = append(order, i)
			}
		}
	}
	return order
}

// takeBatched decides d, a demand of GCRA limits and (slots) Concurrency
// limits: at once if no decision of its scope is in flight (or fewer than
// s.batchInFlight, s.slotInFlight with slots), else in the next batch of
// its scope.
func (s *Store) takeBatched(ctx context.Context, d *quota.Demand, slots bool) (quota.Decision, error) {
	b := &s.batch
	b.mu.Lock()
	q := b.queues[d.Scope]
	if q == nil {
		if b.queues == nil {
			b.queues = map[string]*batchQueue{}
		}
		if q = b.spare; q != nil {
			b.spare = nil
		} else {
			q = &batchQueue{}
		}
		b.queues[d.Scope] = q
	}
	if q.inflight < s.inFlightLimit(q, d, slots) {
		q.inflight++
		b.mu.Unlock()
		dec, err := s.takeAlone(ctx, d, slots)
		s.next(d.Scope, q)
		return dec, err
	}
	c := newBatchCall(d, slots)
	c.done = make(chan struct{})
	c.deadline, _ = ctx.Deadline()
	q.pending = append(q.pending, c)
	b.mu.Unlock()

	ctx, cancel := s.callContext(ctx)
	defer cancel()
	select {
	case <-c.done:
		if c.state.Load() == callLead {
			return s.lead(ctx, d.Scope, q, c)
		}
		return c.dec, c.err
	case <-ctx.Done():
		if c.state.CompareAndSwap(callQueued, callAbandoned) {
			return quota.Decision{}, fmt.Errorf("redisstore: take: %w: %w", ErrNotSent, ctx.Err())
		}
		if c.state.Load() == callLead {
			// Chosen to lead as its context ended: it leads the others
			// without its own demand, once done is closed (at once).
			<-c.done
			return s.lead(ctx, d.Scope, q, c)
		}
		// Sent: it may have been charged, as any call cut short.
		return quota.Decision{}, fmt.Errorf("redisstore: take: %w", ctx.Err())
	}
}

// inFlightLimit is how many calls of q's scope may be in flight before d
// (slots: d has Concurrency limits) waits to go in a batch:
// s.slotInFlight with slots, s.shareInFlight() with a tenant, else
// s.batchInFlight, or one fewer while the scope's batches have company.
//
// A batch saves Redis three quarters of a lone call's work per demand
// after its first (take_batch.lua), but a batch of one saves nothing and
// costs its caller the wait for a call in flight to end and a hand-off
// to the caller that sends it (lead). So while the scope's last batch held
// one demand (as at BatchInFlight callers of a scope: one fewer in
// flight and one waiting, every time), a demand goes alone from as many
// calls in flight as at the start, and once batches have company (more
// callers) it waits from one fewer, so that fewer demands go alone from
// one caller more on. On the development VM (2 CPUs, Redis beside the
// callers; the bench program's decisions per second of the plain
// decision over the 1-limit floor's, load average 5-6), when
// BatchInFlight was 3: a fixed three made 0.86 and 0.91 at 3 callers and
// 1.06 and 1.13 at 8, a fixed two 0.81 and 0.82 at 3 and 1.15 and 1.22
// at 8.
func (s *Store) inFlightLimit(q *batchQueue, d *quota.Demand, slots bool) int {
	switch {
	case slots:
		return s.slotInFlight
	case d.Shared():
		return s.shareInFlight() // share_batch.go
	case q.company:
		return max(s.batchInFlight-1, 1)
	}
	return s.batchInFlight
}

// next ends a call in flight of scope's queue q: if demands wait, the
// first of them takes over its place in flight and sends the next batch
// itself (lead), or, when one has Concurrency limits, a goroutine does,
// batch after batch, until none waits (flush).
func (s *Store) next(scope string, q *batchQueue) {
	b := &s.batch
	b.mu.Lock()
	if len(q.pending) == 0 {
		idle := s.leave(scope, q)
		b.mu.Unlock()
		if idle {
			s.releases.arm(s, scope)
		}
		return
	}
	if c := s.leader(q); c != nil {
		b.mu.Unlock()
		close(c.done)
		return
	}
	b.mu.Unlock()
	go s.flush(scope, q)
}

// leader takes the demand waiting in q whose caller's deadline is the
// latest (none is the latest; the first of equals) out of the queue, to
// lead the next batch, and returns it; nil when a demand waiting has
// Concurrency limits (flush, which waits for the callers of such a batch
// to come back, sends them) or none waits any longer. The caller holds
// s.batch.mu.
//
// A waiting caller wakes anyway when its batch is decided; leading, it
// wakes once earlier and sends the batch from its own goroutine, whose
// stack has already grown to a call's depth. A goroutine started to send
// each batch costs the callers' CPU about a tenth more per decision at 8
// callers (its creation, and its stack grown and copied at every batch:
// 5% of the bench's CPU profile in runtime.copystack alone).
//
// The leader's deadline bounds the batch's call (lead), so that it
// returns by its deadline as a lone call does; every other caller of the
// batch has given up by then, since none has a later deadline.
func (s *Store) leader(q *batchQueue) *batchCall {
	if slices.ContainsFunc(q.pending, func(c *batchCall) bool { return c.slots > 0 }) {
		return nil
	}
	best := -1
	for n, c := range q.pending {
		if c.state.Load() != callQueued {
			continue
		}
		if best < 0 || later(c.deadline, q.pending[best].deadline) {
			best = n
		}
	}
	if best < 0 {
		return nil
	}
	c := q.pending[best]
	if !c.state.CompareAndSwap(callQueued, callLead) {
		return s.leader(q) // abandoned meanwhile: look again
	}
	q.pending = slices.Delete(q.pending, best, best+1)
	return c
}

// later reports whether deadline a is later than b, zero being none (the
// latest).
func later(a, b time.Time) bool {
	switch {
	case a.IsZero():
		return !b.IsZero()
	case b.IsZero():
		return false
	}
	return a.After(b)
}

// lead sends the next batch of q's scope with c, a demand that leader
// took out of the queue, first (c's own demand left out when ctx has
// ended), hands its place in flight on (next), and returns c's result.
func (s *Store) lead(ctx context.Context, scope string, q *batchQueue, c *batchCall) (quota.Decision, error) {
	b := &s.batch
	b.mu.Lock()
	own := ctx.Err() == nil
	calls := make([]*batchCall, 0, min(len(q.pending)+1, s.batchMax))
	if own {
		calls = append(calls, c)
	}
	calls, _ = s.takePending(q, calls)
	b.mu.Unlock()
	if len(calls) > 0 {
		// Bounded by the per-call timeout and c's deadline (leader), not
		// ended by c's cancellation: the others wait with their own.
		bctx := context.Background()
		if !c.deadline.IsZero() {
			var stop context.CancelFunc
			bctx, stop = context.WithDeadline(bctx, c.deadline)
			defer stop()
		}
		bctx, cancel := s.callContext(bctx)
		s.decideBatch(bctx, calls)
		cancel()
		for _, p := range calls {
			if p != c {
				close(p.done)
			}
		}
	}
	s.next(scope, q)
	if !own {
		return quota.Decision{}, fmt.Errorf("redisstore: take: %w: %w", ErrNotSent, ctx.Err())
	}
	return c.dec, c.err
}

// leave gives up a place in flight of q, and drops q when it is idle,
// which it reports. The caller holds s.batch.mu, and when q is idle arms
// the send of the scope's queued releases after unlocking
// (releaseQueue.arm: the lock order is releases, then batch).
func (s *Store) leave(scope string, q *batchQueue) bool {
	if q.inflight--; q.inflight == 0 && len(q.pending) == 0 {
		delete(s.batch.queues, scope)
		q.company = false
		s.batch.spare = q
		return true
	}
	return false
}

// inFlight reports whether a take of scope is in flight.
func (s *Store) inFlight(scope string) bool {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return s.batch.queues[scope] != nil
}

// takePending appends to calls, up to s.batchMax in all, the demands
// waiting in q, each marked sent, takes them and the abandoned ones among
// them out of the queue, and notes whether the batch has company. It
// returns calls and how many demands still wait. The caller holds
// s.batch.mu.
func (s *Store) takePending(q *batchQueue, calls []*batchCall) ([]*batchCall, int) {
	n := 0
	for ; n < len(q.pending) && len(calls) < s.batchMax; n++ {
		if c := q.pending[n]; c.state.CompareAndSwap(callQueued, callSent) {
			calls = append(calls, c)
		}
	}
	rest := copy(q.pending, q.pending[n:])
	clear(q.pending[rest:])
	q.pending = q.pending[:rest]
	if len(calls) > 0 {
		q.company = len(calls) > 1
	}
	return calls, rest
}

// flush sends q's waiting demands in batches of at most s.batchMax until
// none waits, then gives up its place in flight. After a batch of n
// demands with Concurrency limits it yields (runtime.Gosched) before it
// looks again, and again while fewer than n wait and more than at its
// last look: the callers it has just answered, who hold a slot for a
// moment and come back (Take, Release, Take: a request at a time), then
// join its next batch rather than go alone or in bits (at 8 such callers
// in the bench program, batches of 8 rather than of 1 to 8 evenly; Redis
// CPU per decision 6.6-7.1 µs against 8.4-9.8 with one yield when none
// waited, client CPU 9.5-12.2 against 12.3-14.3).
func (s *Store) flush(scope string, q *batchQueue) {
	b := &s.batch
	// back: how many callers of the last batch, one with Concurrency
	// limits, may come back for the next; seen: how many waited at the
	// last look (-1: none yet).
	back, seen := 0, -1
	for {
		b.mu.Lock()
		if waiting := len(q.pending); back > 0 && waiting < back && waiting > seen {
			b.mu.Unlock()
			seen = waiting
			runtime.Gosched()
			continue
		}
		back = 0
		calls, rest := s.takePending(q, nil)
		if len(calls) == 0 && rest == 0 {
			idle := s.leave(scope, q)
			b.mu.Unlock()
			if idle {
				s.releases.arm(s, scope)
			}
			return
		}
		b.mu.Unlock()
		if len(calls) > 0 {
			s.sendBatch(calls)
			if slices.ContainsFunc(calls, func(c *batchCall) bool { return c.slots > 0 }) {
				back, seen = len(calls), -1
			}
		}
	}
}

// takeAlone decides d, a demand of GCRA limits and (slots) Concurrency
// limits, in a call of its own: take_gcra.lua, or take_batch.lua with
// one demand when it has Concurrency limits.
func (s *Store) takeAlone(ctx context.Context, d *quota.Demand, slots bool) (quota.Decision, error) {
	if !slots {
		return s.take(ctx, d, !d.Shared(), false) // take_share.lua for a tenant's
	}
	c := newBatchCall(d, true)
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	s.decideBatch(ctx, []*batchCall{c})
	return c.dec, c.err
}

// sendBatch decides calls in one round trip and hands each its result.
// The call is bounded by the per-call timeout, not by any caller's
// context: the callers wait with their own.
func (s *Store) sendBatch(calls []*batchCall) {
	ctx, cancel := s.callContext(context.Background())
	defer cancel()
	defer func() {
		for _, c := range calls {
			close(c.done)
		}
	}()
	s.decideBatch(ctx, calls)
}

// decideBatch decides calls, demands of one scope, in one round trip
// (take_batch.lua; take_gcra.lua for a lone demand of GCRA limits only)
// and sets each one's result. When some demand has Concurrency limits,
// the call carries the scope's released leases (releases.go), and demand
// n's lease is the call's id and "." n (take_batch.lua).
func (s *Store) decideBatch(ctx context.Context, calls []*batchCall) {
	calls, shared := splitShared(calls) // demands with a tenant: share_batch.go
	if len(shared) > 0 {
		s.decideShareBatch(ctx, shared)
		if len(calls) == 0 {
			return
		}
	}
	if len(calls) == 1 && calls[0].slots == 0 {
		c := calls[0]
		c.dec, c.err = s.take(ctx, c.d, true, false)
		return
	}
	var id string
	var carried []leaseRelease
	for _, c := range calls {
		if c.slots > 0 {
			id = s.nextID()
			var err error
			if carried, err = s.releases.carry(ctx, c.d.Scope); err != nil {
				for _, c := range calls {
					c.err = fmt.Errorf("redisstore: take: %w", err)
				}
				return
			}
			groupReleases(carried)
			break
		}
	}
	nk, na := len(carried), 2+3*len(carried)
	for _, c := range calls {
		nk += len(c.d.Pauses) + len(c.d.Limits)
		na += 4 + 2*len(c.d.Limits)
	}
	keys := make([]string, 0, nk)
	args, mark := s.scriptArgs(na, id, true)
	// The number of demands, negative when all of several are alike and
	// sent as the first alone (countArg), and " f" when some limit's
	// arrival times have fractions (take_batch.lua).
	same := allAlike(calls)
	count := countArg(len(calls), same)
	for _, c := range calls {
		if !gcraExact(c.d) {
			count = fmt.Sprint(count) + " f"
			break
		}
	}
	args = append(args, count, 0) // the runs of releases carried, set below
	runsAt := len(args) - 1
	// A demand like the one before it (as most are) goes as "=" alone, or
	// not at all when all are alike.
	var prev *quota.Demand
	for _, c := range calls {
		d := c.d
		if prev != nil && alike(d, prev) {
			if !same {
				args = append(args, sameDemand)
			}
			continue
		}
		keys = appendBatchKeys(keys, s.takeKeys(d, ""), len(d.Pauses), c.order)
		args = append(args, len(d.Pauses), len(d.Limits)-c.slots, c.slots, demandMaxWait(d))
		args = appendBatchLimits(args, d, c.slots > 0)
		prev = d
	}
	var runs int
	keys, args, runs = appendReleaseRuns(keys, args, carried)
	args[runsAt] = runs
	res, err := s.run(ctx, takeBatchScript, mark, keys, args...).Slice()
	var now int64
	if err == nil {
		var ok bool
		if now, ok = res[0].(int64); !ok {
			err = fmt.Errorf("malformed reply: clock %v", res[0])
		}
	}
	if err != nil {
		s.reload.note(err)
		s.batchFailed(calls, id, carried)
		err = fmt.Errorf("redisstore: take: %w", s.configErr(resent(err)))
		for _, c := range calls {
			c.err = err
		}
		return
	}
	next := 1
	for i, c := range calls {
		var leaseID string
		if c.slots > 0 {
			leaseID = batchLeaseID(id, i)
		}
		c.dec, next, c.err = parseBatchEntry(res, next, now, c, leaseID)
		c.dec, c.err = s.identify(c.dec, c.err)
	}
	if next != len(res) {
		err := fmt.Errorf("redisstore: take: malformed reply: %d entries for %d demands", len(res)-1, len(calls))
		for _, c := range calls {
			c.dec, c.err = quota.Decision{}, err
		}
	}
}

// batchLeaseID is the lease of the demand at index i of a batch call
// whose id is id (take_batch.lua: "<id>.<n>", n from 1). Decision ids
// (nextID) have one ".", so none is a lease id of a batch.
func batchLeaseID(id string, i int) string {
	return id + "." + strconv.Itoa(i+1)
}

// batchFailed gives back the releases a failed batch call carried (or
// may have carried: a release applied twice does nothing), and releases
// the leases its demands may have taken: the call may have run (a reply
// lost, a call sent again and refused: ErrResent) and its callers get
// an error, so nobody else would release them before they expire.
func (s *Store) batchFailed(calls []*batchCall, id string, carried []leaseRelease) {
	if id == "" {
		return
	}
	scope := calls[0].d.Scope
	s.releases.giveBack(s, scope, carried, releaseRetry)
	var rs []leaseRelease
	ks := s.keysOf(scope)
	until := time.Now()
	for i, c := range calls {
		for j := range c.d.Limits {
			if b := &c.d.Limits[j]; c.slots > 0 && b.Limit.Algorithm == quota.Concurrency {
				rs = append(rs, leaseRelease{key: ks.limit(b), id: batchLeaseID(id, i), channel: ks.released(b), until: until.Add(b.Limit.Per)})
			}
		}
	}
	s.releases.add(s, scope, rs, releaseRetry)
}

// appendBatchKeys appends keys, a demand's keys in its own order (pauses
// of them, then one per limit), to all in take_batch.lua's order.
func appendBatchKeys(all, keys []string, pauses int, order []int) []string {
	if order == nil {
		return append(all, keys...)
	}
	all = append(all, keys[:pauses]...)
	for _, i := range order {
		all = append(all, keys[pauses+i])
	}
	return all
}

// appendBatchLimits appends take_batch.lua's pairs of d's limits: per
// GCRA limit the charge and the allowance (appendGCRAPairs); then, when
// slots, per Concurrency limit the lease time and the slots.
func appendBatchLimits(args []any, d *quota.Demand, slots bool) []any {
	if !slots {
		return appendGCRAPairs(args, d)
	}
	for i := range d.Limits {
		if b := &d.Limits[i]; b.Limit.Algorithm == quota.GCRA {
			charge, room := gcraArgs(b, int64(d.CostOf(i)))
			args = append(args, charge, room)
		}
	}
	for i := range d.Limits {
		if b := &d.Limits[i]; b.Limit.Algorithm == quota.Concurrency {
			args = append(args, b.Limit.Per.Microseconds(), int64(b.Limit.Rate)-int64(b.Headroom))
		}
	}
	return args
}

// groupReleases orders rs so that the releases of one key are together:
// take_batch.lua removes each run of them with one ZREM
// (appendReleaseRuns).
func groupReleases(rs []leaseRelease) {
	slices.SortStableFunc(rs, func(a, b leaseRelease) int { return strings.Compare(a.key, b.key) })
}

// alike reports whether demands a and b have the same keys and arguments
// in take_batch.lua: every field of theirs is equal (Bucket is
// comparable; TestDemandFieldsAlike fails when Demand gains a field that
// alike does not compare).
func alike(a, b *quota.Demand) bool {
	return a == b || a.Scope == b.Scope && a.Cost == b.Cost && a.MaxWait == b.MaxWait &&
		slices.Equal(a.Pauses, b.Pauses) && slices.Equal(a.Limits, b.Limits)
}

// sameDemand is take_batch.lua's argument for a demand the same as the
// one before it.
var sameDemand any = "="

// allAlike reports whether calls are several demands all alike, which
// take_batch.lua and take_share_batch.lua take as the first alone and a
// negative count (countArg).
func allAlike(calls []*batchCall) bool {
	if len(calls) < 2 {
		return false // a lone demand's count stays 1 (countArg)
	}
	for _, c := range calls[1:] {
		if !alike(c.d, calls[0].d) {
			return false
		}
	}
	return true
}

// negCounts are -0 to -DefaultBatchMax, each boxed once.
var negCounts = func() (a [DefaultBatchMax + 1]any) {
	for i := range a {
		a[i] = -i
	}
	return a
}()

// countArg is the count argument of a batch of n demands: n, or -n when
// they are all alike. An int boxed in an any allocates unless it is
// below 256 and not negative, hence negCounts: a slot demand goes in a
// batch, if only of one, at every decision.
func countArg(n int, same bool) any {
	switch {
	case !same:
		return n
	case n <= DefaultBatchMax:
		return negCounts[n]
	}
	return -n
}

// parseBatchEntry reads the entry of demand c at res[k] in take_batch.lua's
// reply, now the reply's clock, and returns its decision and where the
// next entry starts. id is c's lease id.
func parseBatchEntry(res []any, k int, now int64, c *batchCall, id string) (quota.Decision, int, error) {
	d := c.d
	if k >= len(res) {
		return quota.Decision{}, k, fmt.Errorf("redisstore: take: malformed reply: %d entries", len(res))
	}
	if v, ok := res[k].(string); ok {
		dec, err := parseBatchString(v, c, id)
		return dec, k + 1, err
	}
	// Integers: the TAT of the GCRA limit (when there is one), then the
	// slots left (when there are Concurrency limits).
	gcra := len(d.Limits) - c.slots
	n := gcra
	if c.slots > 0 {
		n++
	}
	if gcra > 1 || k+n > len(res) {
		return quota.Decision{}, k + 1, fmt.Errorf("redisstore: take: malformed reply %v", res[k])
	}
	var buf, fr [8]int64
	reply := append(buf[:0], 1, 0, -1, -1, now, -1)
	var tat, left int64
	var ok bool
	if gcra == 1 {
		if tat, ok = res[k].(int64); !ok {
			return quota.Decision{}, k + n, fmt.Errorf("redisstore: take: malformed reply %v", res[k])
		}
	}
	if c.slots > 0 {
		if left, ok = res[k+n-1].(int64); !ok {
			return quota.Decision{}, k + n, fmt.Errorf("redisstore: take: malformed reply %v", res[k+n-1])
		}
		if gcra == 0 {
			reply[5] = left // free slots count in Remaining only without other limits (quota.Decision)
		}
	}
	for i := range d.Limits {
		mark := tat
		if l := &d.Limits[i].Limit; l.Algorithm == quota.Concurrency {
			mark = now + l.Per.Microseconds() // the lease's expiry
		}
		reply = append(reply, mark)
	}
	if len(reply) > len(buf) {
		return quota.Decision{}, k + n, fmt.Errorf("redisstore: take: %d limits in a batch", len(d.Limits))
	}
	dec, err := decide(reply, fr[:len(reply)], d, id, res[k])
	return dec, k + n, err
}

// parseBatchString reads take_batch.lua's string entry v of demand c,
// whose limits it lists in its own order (batchOrder).
func parseBatchString(v string, c *batchCall, id string) (quota.Decision, error) {
	var buf, fbuf [8]int64
	n, fr, err := parseFields(v, buf[:0], fbuf[:0])
	if err != nil {
		return quota.Decision{}, err
	}
	if c.order != nil && len(n) >= 4 {
		if n[0] == 1 && len(n) == 6+len(c.order) {
			marks, fracs := slices.Clone(n[6:]), slices.Clone(fr[6:])
			for k, i := range c.order {
				n[6+i], fr[6+i] = marks[k], fracs[k]
			}
		} else if n[0] == 0 && n[2] >= 0 && n[2] < int64(len(c.order)) {
			n[2] = int64(c.order[n[2]])
		}
	}
	if n[0] == 1 && len(n) > 5 && !c.d.SlotsOnly() {
		n[5] = -1 // the slots left: they count in Remaining only without other limits (quota.Decision)
	}
	return decide(n, fr, c.d, id, v)
}
