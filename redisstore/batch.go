package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/quotakit/throttle/quota"
)

// WithBatching sets how many demands of one scope may go together in one
// batch; a max below 2 turns batching off. Batching is on by default
// ([DefaultBatchMax]): while [BatchInFlight] decisions of a scope are in
// flight, later demands of that scope wait, and go together, up to max at
// a time, in one EVALSHA (take_batch.lua) that decides them in order of
// arrival at one instant of Redis's clock, each all-or-nothing as if it
// were its own call. Under heavy concurrency this saves Redis most of its
// work per decision (one read and one write per key for the whole batch,
// one round trip's system calls) at the price of waiting for a call of
// the scope to end; below that concurrency every demand goes alone, as
// with batching off. It applies to demands whose limits are all GCRA,
// and not with [ReplayIDs]; other demands always go alone.
//
// A failed batch fails every demand in it with the same error, and a
// demand whose context ends while it waits unsent is never sent
// ([ErrNotSent]).
func WithBatching(max int) Option {
	return func(s *Store) { s.batchMax = max }
}

// DefaultBatchMax is the most demands one batch decides when [WithBatching]
// is not given.
const DefaultBatchMax = 64

// BatchInFlight is how many decisions of one scope a Store has in flight
// before later demands of the scope wait to go together in a batch. Below
// it, batching costs nothing: every demand is its own call. A batch costs
// Redis a fraction of the calls it replaces (about 12k instructions per
// demand against 48k for a call of its own, for demands alike), so three
// in flight are enough: on the development VM (2 CPUs, Redis beside the
// callers) 8 callers decided 1.13 and 1.23 times as many demands per
// second as the 1-limit floor in two runs with three, 0.94 with four, and
// 0.84 to 0.85 with batching off (as with eight, the default before,
// under which no batch formed below 9 callers); 4 to 6 callers about as
// many as with batching off (see docs/benchmarks.md).
const BatchInFlight = 3

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
}

// batchCall states.
const (
	callQueued int32 = iota
	callSent
	callAbandoned
)

// A batchCall is one waiting demand and, once done is closed, its result.
type batchCall struct {
	d     *quota.Demand
	state atomic.Int32
	done  chan struct{}
	dec   quota.Decision
	err   error
}

// takeBatched decides d, a GCRA-only demand: at once if no decision of its
// scope is in flight (or fewer than s.batchInFlight), else in the next
// batch of its scope.
func (s *Store) takeBatched(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
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
	if q.inflight < s.batchInFlight {
		q.inflight++
		b.mu.Unlock()
		dec, err := s.take(ctx, d, true, false)
		s.next(d.Scope, q)
		return dec, err
	}
	c := &batchCall{d: d, done: make(chan struct{})}
	q.pending = append(q.pending, c)
	b.mu.Unlock()

	ctx, cancel := s.callContext(ctx)
	defer cancel()
	select {
	case <-c.done:
		return c.dec, c.err
	case <-ctx.Done():
		if c.state.CompareAndSwap(callQueued, callAbandoned) {
			return quota.Decision{}, fmt.Errorf("redisstore: take: %w: %w", ErrNotSent, ctx.Err())
		}
		// Sent: it may have been charged, as any call cut short.
		return quota.Decision{}, fmt.Errorf("redisstore: take: %w", ctx.Err())
	}
}

// next ends a call in flight of scope's queue q: if demands wait, a
// goroutine takes over its place in flight and sends them, batch after
// batch, until none does.
func (s *Store) next(scope string, q *batchQueue) {
	b := &s.batch
	b.mu.Lock()
	if len(q.pending) == 0 {
		s.leave(scope, q)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go s.flush(scope, q)
}

// leave gives up a place in flight of q, and drops q when it is idle. The
// caller holds s.batch.mu.
func (s *Store) leave(scope string, q *batchQueue) {
	if q.inflight--; q.inflight == 0 && len(q.pending) == 0 {
		delete(s.batch.queues, scope)
		s.batch.spare = q
	}
}

// flush sends q's waiting demands in batches of at most s.batchMax until
// none waits, then gives up its place in flight.
func (s *Store) flush(scope string, q *batchQueue) {
	b := &s.batch
	for {
		b.mu.Lock()
		var calls []*batchCall
		n := 0
		for ; n < len(q.pending) && len(calls) < s.batchMax; n++ {
			if c := q.pending[n]; c.state.CompareAndSwap(callQueued, callSent) {
				calls = append(calls, c)
			}
		}
		rest := copy(q.pending, q.pending[n:])
		clear(q.pending[rest:])
		q.pending = q.pending[:rest]
		if len(calls) == 0 && rest == 0 {
			s.leave(scope, q)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if len(calls) > 0 {
			s.sendBatch(calls)
		}
	}
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
	if len(calls) == 1 {
		c := calls[0]
		c.dec, c.err = s.take(ctx, c.d, true, false)
		return
	}
	nk, na := 0, 1
	for _, c := range calls {
		nk += len(c.d.Pauses) + len(c.d.Limits)
		na += 3 + 2*len(c.d.Limits)
	}
	keys := make([]string, 0, nk)
	args, mark := s.scriptArgs(na, "", true)
	// The number of demands, and " f" when some limit's arrival times
	// have fractions (take_batch.lua).
	var count any = len(calls)
	for _, c := range calls {
		if !gcraExact(c.d) {
			count = strconv.Itoa(len(calls)) + " f"
			break
		}
	}
	args = append(args, count)
	// A demand like the one before it (as most are) goes as "=" alone.
	var prev *quota.Demand
	for _, c := range calls {
		d := c.d
		if prev != nil && alike(d, prev) {
			args = append(args, sameDemand)
			continue
		}
		keys = append(keys, s.takeKeys(d, "")...)
		args = append(args, len(d.Pauses), len(d.Limits), demandMaxWait(d))
		args = appendGCRAPairs(args, d)
		prev = d
	}
	res, err := s.run(ctx, takeBatchScript, mark, keys, args...).Slice()
	var now int64
	if err == nil && len(res) != 1+len(calls) {
		err = fmt.Errorf("malformed reply: %d results for %d demands", len(res)-1, len(calls))
	} else if err == nil {
		var ok bool
		if now, ok = res[0].(int64); !ok {
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
	for i, c := range calls {
		c.dec, c.err = s.identify(parseBatchReply(res[1+i], now, c.d))
	}
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

// parseBatchReply reads one demand's entry of take_batch.lua's reply:
// the TAT of a demand of one limit granted at now, or take_gcra.lua's
// string.
func parseBatchReply(res any, now int64, d *quota.Demand) (quota.Decision, error) {
	tat, ok := res.(int64)
	if !ok {
		return parseTakeFast(res, d, "")
	}
	if len(d.Limits) != 1 {
		return quota.Decision{}, fmt.Errorf("redisstore: take: malformed reply %d for %d limits", tat, len(d.Limits))
	}
	var fr [7]int64
	n := [7]int64{1, 0, -1, -1, now, -1, tat}
	return decide(n[:], fr[:], d, "", tat)
}
