package redisstore

import (
	"context"
	"time"

	"github.com/quotakit/throttle/quota"
)

// WithNow makes the scripts take the current instant from now instead of
// Redis's TIME, so the conformance suite can drive time.
var WithNow = withNow

// WithoutReplayIDs turns decision ids off even for a client that retries,
// so tests can show the double charge that ids prevent.
func WithoutReplayIDs() Option {
	return func(s *Store) { s.replay = replayOffForTest }
}

// ClusterReloads returns how many cluster state reloads s has asked for.
func ClusterReloads(s *Store) int64 { return s.reload.count.Load() }

// WithGenericTake makes Take run take.lua even for demands whose limits
// are all GCRA, so tests can compare it with take_gcra.lua.
func WithGenericTake() Option {
	return func(s *Store) { s.generic = true }
}

// ReplayMode names what s does about calls sent again: "ids", "detect" or
// "none".
func ReplayMode(s *Store) string {
	switch {
	case s.replayMS > 0:
		return "ids"
	case s.detect:
		return "detect"
	}
	return "none"
}

// TakeBatch decides ds, demands of GCRA and Concurrency limits of one
// scope, in one batch (take_batch.lua), as a flush of waiting demands
// does.
func TakeBatch(s *Store, ds []*quota.Demand) ([]quota.Decision, []error) {
	calls := make([]*batchCall, len(ds))
	for i, d := range ds {
		calls[i] = newBatchCall(d, hasSlots(d))
		calls[i].done = make(chan struct{})
	}
	s.sendBatch(calls)
	decs, errs := make([]quota.Decision, len(ds)), make([]error, len(ds))
	for i, c := range calls {
		<-c.done
		decs[i], errs[i] = c.dec, c.err
	}
	return decs, errs
}

// WithBatchInFlight sets how many calls of a scope may be in flight
// before demands wait to go together (BatchInFlight by default).
func WithBatchInFlight(n int) Option {
	return func(s *Store) { s.batchInFlight, s.slotInFlight = n, n }
}

// WithReleaseLinger sets how long released leases wait for a take or
// claim of their scope to carry them (releaseLinger), so tests can tell
// the carried path from the sent one.
func WithReleaseLinger(d time.Duration) Option {
	return func(s *Store) { s.linger = d }
}

// AlgoCodes returns the algorithm codes of the scripts' arguments by the
// name of their Lua constant (prologue.lua), and the algorithm of each.
func AlgoCodes() (codes map[string]string, algos map[string]quota.Algorithm) {
	codes, algos = map[string]string{}, map[string]quota.Algorithm{}
	for _, c := range algoCodes {
		codes[c.name], algos[c.name] = c.code, c.algo
	}
	return codes, algos
}

// AlgoCode is the code of a in the scripts' arguments.
var AlgoCode = algoCode

// ParseArrival reads the value of a GCRA key: its arrival time, whole
// microseconds and a fraction in units of 1/Rate µs ("us" or "us:frac").
func ParseArrival(v string) (us, frac int64, err error) { return parseField(v) }

// ScriptParts returns the files put between prologue.lua and a script's
// own file, by script; a part is no script by itself.
func ScriptParts() map[string][]string { return scriptParts }

// ComposeScript returns the text the store runs for the file name.
func ComposeScript(name string) string { return composeScript(name) }

// ConfigCause names the configuration mistake behind a Redis error reply
// on client, or "" (configCause).
var ConfigCause = configCause

// hasSlots reports whether d has a Concurrency limit.
func hasSlots(d *quota.Demand) bool {
	for i := range d.Limits {
		if d.Limits[i].Limit.Algorithm == quota.Concurrency {
			return true
		}
	}
	return false
}

// BatchWaiting returns how many demands of scope wait in s for a batch.
func BatchWaiting(s *Store, scope string) int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	if q := s.batch.queues[scope]; q != nil {
		return len(q.pending)
	}
	return 0
}

// LeadEnded queues ds, plain demands of one scope, as waiting behind a
// call in flight that then ends (Store.next): the first is chosen to lead
// its batch, and leads it with a context that has ended, as when its
// caller gives up at that moment. It returns the others' results,
// whether the scope's queue is still there afterwards, and the error the
// leader's Take returns.
func LeadEnded(s *Store, ds []*quota.Demand) ([]quota.Decision, []error, bool, error) {
	scope := ds[0].Scope
	q, calls := queueWaiting(s, ds, nil)
	s.next(scope, q)
	<-calls[0].done
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.lead(ctx, scope, q, calls[0])
	decs, errs := make([]quota.Decision, len(ds)-1), make([]error, len(ds)-1)
	for i, c := range calls[1:] {
		<-c.done
		decs[i], errs[i] = c.dec, c.err
	}
	return decs, errs, s.inFlight(scope), err
}

// LeaderAmong queues ds, plain demands of one scope, behind a call in
// flight that then ends, each from a caller whose deadline is
// deadlines[i] from now (0: none), and returns the index of the demand
// chosen to lead the next batch and every demand's result once all are
// decided.
func LeaderAmong(s *Store, ds []*quota.Demand, deadlines []time.Duration) (int, []quota.Decision, []error) {
	scope := ds[0].Scope
	q, calls := queueWaiting(s, ds, deadlines)
	s.next(scope, q)
	lead := -1
	for i, c := range calls {
		if c.state.Load() == callLead {
			lead = i
			<-c.done
			calls[i].dec, calls[i].err = s.lead(context.Background(), scope, q, c)
		}
	}
	decs, errs := make([]quota.Decision, len(ds)), make([]error, len(ds))
	for i, c := range calls {
		<-c.done
		decs[i], errs[i] = c.dec, c.err
	}
	return lead, decs, errs
}

// queueWaiting makes ds, plain demands of one scope, wait in its queue
// behind one call in flight, each from a caller whose deadline is
// deadlines[i] from now (nil or 0: none), and returns the queue and their
// calls.
func queueWaiting(s *Store, ds []*quota.Demand, deadlines []time.Duration) (*batchQueue, []*batchCall) {
	q := &batchQueue{inflight: 1}
	calls := make([]*batchCall, len(ds))
	now := time.Now()
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	if s.batch.queues == nil {
		s.batch.queues = map[string]*batchQueue{}
	}
	s.batch.queues[ds[0].Scope] = q
	for i, d := range ds {
		calls[i] = newBatchCall(d, false)
		calls[i].done = make(chan struct{})
		if i < len(deadlines) && deadlines[i] > 0 {
			calls[i].deadline = now.Add(deadlines[i])
		}
		q.pending = append(q.pending, calls[i])
	}
	return q, calls
}

// InFlight reports whether a take of scope is in flight in s, or waits.
func InFlight(s *Store, scope string) bool { return s.inFlight(scope) }

// SetChargeOrder makes take_gcra.lua's one-limit path charge first
// (order 1) or read first (-1) on every call of s, or as its hints say
// (0), for tests of both orders.
func SetChargeOrder(s *Store, order int) { s.chargeOrder = order }
