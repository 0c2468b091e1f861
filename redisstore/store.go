package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle"
	"github.com/redis/go-redis/v9"
)

// Store is a [throttle.Store] kept in Redis, shared by every instance of a
// service that uses the same Redis and prefix. Each decision is one
// EVALSHA that reads Redis's clock, checks every limit and pause of the
// demand, and charges all limits or none. Store is safe for concurrent use.
type Store struct {
	client    redis.UniversalClient
	prefix    string
	timeout   time.Duration
	replay    Replay
	multiExec bool
	now       func() time.Time // tests only; nil: Redis's TIME

	replayMS int64 // how long a reply is remembered; 0: not at all
	idBase   string
	seq      atomic.Uint64
	reload   reloader // cluster state reloads on connection errors
}

var _ throttle.Store = (*Store)(nil)

// New returns a Store that keeps its state in Redis through client, which
// may be a *redis.Client (single node, Sentinel), a *redis.ClusterClient or
// a *redis.Ring. See the package documentation for the key layout, the
// Cluster trade-off and what happens when Redis fails. New does not
// contact Redis.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s := &Store{client: client, prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, o := range opts {
		o(s)
	}
	s.reload.init(client)
	if strings.ContainsAny(s.prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", s.prefix)
	}
	retries := mayRetry(client)
	switch s.replay {
	case ReplayAuto:
		if retries {
			s.replayMS = s.replayWindow()
		}
	case ReplayIDs:
		s.replayMS = s.replayWindow()
	case replayOffForTest:
	case ReplayNoRetries:
		if retries {
			return nil, errors.New("redisstore: ReplayNoRetries needs a client that never retries (MaxRetries -1, and MaxRedirects -1 for a ClusterClient)")
		}
	default:
		return nil, fmt.Errorf("redisstore: unknown Replay %d", s.replay)
	}
	var b [9]byte
	_, _ = rand.Read(b[:]) // never fails; see crypto/rand.Read
	s.idBase = base64.RawURLEncoding.EncodeToString(b[:]) + "."
	return s, nil
}

// replayWindow is how long, in ms, a decision's reply is remembered: past
// every retry go-redis can make within the per-call timeout.
func (s *Store) replayWindow() int64 {
	return max(time.Second, 4*s.timeout).Milliseconds()
}

// mayRetry reports whether client may send a command again after a
// network error, which would run a script twice.
func mayRetry(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().MaxRetries > 0
	case *redis.Ring:
		return c.Options().MaxRetries > 0
	case *redis.ClusterClient:
		o := c.Options()
		return o.MaxRetries > 0 || o.MaxRedirects > 0
	}
	return true
}

// nextID returns an id unique to this decision among all stores.
func (s *Store) nextID() string {
	return s.idBase + strconv.FormatUint(s.seq.Add(1), 36)
}

func (s *Store) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout > 0 {
		return context.WithTimeout(ctx, s.timeout)
	}
	return ctx, func() {}
}

// nowArg is the instant the scripts use: "" (Redis's TIME) except in tests.
func (s *Store) nowArg() string {
	if s.now == nil {
		return ""
	}
	return formatInt(s.now().UnixMicro())
}

// Take implements [throttle.Store.Take] in one round trip. An error wraps
// the go-redis or context error; the demand may then have been charged.
func (s *Store) Take(ctx context.Context, d *throttle.Demand) (throttle.Decision, error) {
	if err := checkDemand(d); err != nil {
		return throttle.Decision{}, err
	}
	if s.multiExec {
		return s.takeMultiExec(ctx, d)
	}
	ks := newKeys(s.prefix, d.Scope)
	id := s.nextID()
	keys := make([]string, 0, len(d.Pauses)+len(d.Limits)+1)
	for _, p := range d.Pauses {
		keys = append(keys, ks.pause(p))
	}
	args := make([]any, 0, 5+4*len(d.Limits))
	args = append(args, s.nowArg(), max(d.MaxWait, 0).Microseconds(), len(d.Pauses), s.replayMS, id)
	cost := int64(d.Cost)
	for i := range d.Limits {
		b := &d.Limits[i]
		keys = append(keys, ks.limit(b))
		l := b.Limit
		p, r := l.Per.Microseconds(), int64(l.Rate)
		switch l.Algorithm {
		case throttle.GCRA:
			t := (p + r - 1) / r
			args = append(args, 0, cost*t, int64(burst(l))*t-cost*t, cost)
		default:
			args = append(args, int(l.Algorithm), p, r-cost, cost)
		}
	}
	if s.replayMS > 0 {
		keys = append(keys, ks.replay(id))
	}

	ctx, cancel := s.callContext(ctx)
	defer cancel()
	res, err := takeScript.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		s.reload.note(err)
		return throttle.Decision{}, fmt.Errorf("redisstore: take: %w", err)
	}
	return parseTake(res, d, id)
}

// parseTake reads take.lua's reply.
func parseTake(res []any, d *throttle.Demand, id string) (throttle.Decision, error) {
	if len(res) < 4 {
		return throttle.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", res)
	}
	var n [4]int64
	for i := range n {
		v, ok := res[i].(int64)
		if !ok {
			return throttle.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", res)
		}
		n[i] = v
	}
	ok, delay, limit, pause := n[0] == 1, n[1], n[2], n[3]
	if delay < 0 {
		return throttle.Decision{}, fmt.Errorf("redisstore: take: negative delay %d in reply", delay)
	}
	dec := throttle.Decision{OK: ok, Delay: time.Duration(delay) * time.Microsecond, Limit: -1}
	if !ok {
		if limit < -1 || limit >= int64(len(d.Limits)) || pause < -1 || pause >= int64(len(d.Pauses)) {
			return throttle.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", res)
		}
		dec.Limit = int(limit)
		if limit < 0 && pause >= 0 {
			dec.Pause = d.Pauses[pause]
		}
		return dec, nil
	}
	if len(res) != 4+len(d.Limits) {
		return throttle.Decision{}, fmt.Errorf("redisstore: take: reply has %d marks for %d limits", len(res)-4, len(d.Limits))
	}
	r := &throttle.Reservation{Demand: d, Marks: make([]int64, len(d.Limits)), ID: id}
	for i := range r.Marks {
		m, ok := res[4+i].(int64)
		if !ok {
			return throttle.Decision{}, fmt.Errorf("redisstore: take: malformed reply %v", res)
		}
		r.Marks[i] = m
	}
	dec.Reservation = r
	return dec, nil
}

// Cancel implements [throttle.Store.Cancel] in one round trip. It does
// nothing in the MULTI/EXEC mode ([WithMultiExec]).
func (s *Store) Cancel(ctx context.Context, r *throttle.Reservation) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return errors.New("redisstore: cancel: malformed reservation")
	}
	if s.multiExec || len(r.Marks) == 0 {
		return nil
	}
	d := r.Demand
	ks := newKeys(s.prefix, d.Scope)
	keys := make([]string, len(d.Limits))
	args := make([]any, 0, 2+4*len(d.Limits))
	args = append(args, s.nowArg(), r.ID)
	cost := int64(d.Cost)
	for i := range d.Limits {
		b := &d.Limits[i]
		keys[i] = ks.limit(b)
		l := b.Limit
		p, rate := l.Per.Microseconds(), int64(l.Rate)
		if l.Algorithm == throttle.GCRA {
			if rate <= 0 {
				return errors.New("redisstore: cancel: malformed reservation")
			}
			args = append(args, 0, cost*((p+rate-1)/rate), r.Marks[i], cost)
		} else {
			args = append(args, int(l.Algorithm), p, r.Marks[i], cost)
		}
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	if err := cancelScript.Run(ctx, s.client, keys, args...).Err(); err != nil {
		s.reload.note(err)
		return fmt.Errorf("redisstore: cancel: %w", err)
	}
	return nil
}

// Pause implements [throttle.Store.Pause] in one round trip, on Redis's
// clock. A non-positive d is a no-op.
func (s *Store) Pause(ctx context.Context, scope, key string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	us := int64(d / time.Microsecond)
	if d%time.Microsecond != 0 {
		us++
	}
	ks := newKeys(s.prefix, scope)
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	var err error
	if s.multiExec {
		err = s.pauseMultiExec(ctx, ks, key, d)
	} else {
		err = pauseScript.Run(ctx, s.client, []string{ks.pause(key)}, s.nowArg(), us).Err()
	}
	if err != nil {
		s.reload.note(err)
		return fmt.Errorf("redisstore: pause: %w", err)
	}
	return nil
}
