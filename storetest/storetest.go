package storetest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/require"
)

// Config tells [Run] how to make the stores under test.
type Config struct {
	// New returns a fresh Store for one test whose clock is now. A store's
	// clock is whole microseconds: it uses now().UnixMicro(). New must not
	// be nil; it may register cleanup with t.Cleanup.
	New func(t *testing.T, now func() time.Time) quota.Store

	// Instances, if non-nil, returns n Stores that share one backend
	// through separate clients (separate instances of a service), all
	// using now. It is used by the multi-instance contention cases, which
	// are skipped when it is nil.
	Instances func(t *testing.T, now func() time.Time, n int) []quota.Store
}

// Start is the instant at which every test's [Clock] starts: a whole
// number of days since the Unix epoch, so that fixed windows of 1s, 1min,
// 30min, 1h and 24h all begin exactly at Start. Do not change it.
var Start = time.Unix(86400*20000, 0)

// Run runs the conformance suite against the stores c makes, each case in
// its own parallel subtest with its own scope, so cases may share one
// backend. A store conforms when every subtest passes.
func Run(t *testing.T, c Config) {
	require.NotNil(t, c.New, "storetest: Config.New is nil")
	var nonce [4]byte
	_, _ = rand.Read(nonce[:]) // never fails; see crypto/rand.Read
	s := &suite{c: c, nonce: hex.EncodeToString(nonce[:])}

	t.Run("GCRA", func(t *testing.T) { s.runCases(t, gcraCases()) })
	t.Run("FixedWindow", func(t *testing.T) { s.runCases(t, fixedWindowCases()) })
	t.Run("SlidingLog", func(t *testing.T) { s.runCases(t, slidingLogCases()) })
	t.Run("SlidingWindow", func(t *testing.T) { s.runCases(t, slidingWindowCases()) })
	t.Run("Phases", func(t *testing.T) { s.runCases(t, phaseCases()) })
	t.Run("OddPeriods", func(t *testing.T) { s.runCases(t, oddPeriodCases()) })
	t.Run("LargeQuotas", func(t *testing.T) { s.runCases(t, largeQuotaCases()) })
	t.Run("Usable", s.testUsable)
	t.Run("MultiLimit", func(t *testing.T) { s.runCases(t, multiLimitCases()) })
	t.Run("LimitCosts", func(t *testing.T) { s.runCases(t, limitCostCases()) })
	t.Run("Left", func(t *testing.T) { s.runCases(t, leftCases()) })
	t.Run("Reservations", func(t *testing.T) { s.runCases(t, reservationCases()) })
	t.Run("Placement", func(t *testing.T) { s.runCases(t, placementCases()) })
	t.Run("Cancel", func(t *testing.T) { s.runCases(t, cancelCases()) })
	t.Run("Pauses", func(t *testing.T) { s.runCases(t, pauseCases()) })
	t.Run("Errors", func(t *testing.T) { s.runCases(t, append(errorCases(), phaseErrorCases()...)) })
	t.Run("Headroom", func(t *testing.T) { s.runCases(t, headroomCases()) })
	t.Run("Shares", func(t *testing.T) { s.runCases(t, shareCases()) })
	t.Run("Sync", s.testSync)
	t.Run("Anchor", s.testAnchor)
	t.Run("Settle", s.testSettle)
	t.Run("Retime", s.testRetime)
	t.Run("Shorten", s.testShorten)
	t.Run("Inspect", s.testInspect)
	t.Run("Concurrency", s.testConcurrency)
	t.Run("Contention", s.testContention)
	t.Run("ContentionInstances", s.testContentionInstances)
	t.Run("ConcurrentReservations", s.testConcurrentReservations)
	t.Run("Differential", s.testDifferential)
}

// suite is one call of Run.
type suite struct {
	c     Config
	nonce string // keeps scopes of separate runs on one backend apart
}

// newStore returns a fresh store for t and the clock it runs on, which
// reads Start.
func (s *suite) newStore(t *testing.T) (quota.Store, *Clock) {
	clock := NewClock(Start)
	st := s.c.New(t, clock.Now)
	require.NotNil(t, st, "storetest: Config.New returned nil")
	return st, clock
}

// scope returns a scope unique to the test t and, if non-empty, to the
// variant v: letters, digits and ._- only, at most 64 bytes.
func (s *suite) scope(t testing.TB, v string) string {
	name := s.nonce + "." + t.Name()
	if v != "" {
		name += "." + v
	}
	b := []byte(name)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) <= 64 {
		return string(b)
	}
	sum := sha256.Sum256([]byte(name))
	return string(b[:39]) + "-" + hex.EncodeToString(sum[:12])
}
