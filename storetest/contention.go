package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var algorithms = []quota.Algorithm{quota.GCRA, quota.FixedWindow, quota.SlidingLog, quota.SlidingWindow}

// limitOf returns a limit of algorithm a with burst equal to rate.
func limitOf(a quota.Algorithm, name string, rate int, per time.Duration) quota.Limit {
	return quota.Limit{Name: name, Rate: rate, Per: per, Algorithm: a}
}

// testContention: 64 goroutines on one store, a global limit of 25 and a
// per-category limit of 10 over 4 categories, clock frozen: exactly 25
// are admitted, no category gets more than 10.
func (s *suite) testContention(t *testing.T) {
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			store, _ := s.newStore(t)
			stores := make([]quota.Store, 64)
			for i := range stores {
				stores[i] = store
			}
			s.contend(t, a, stores)
		})
	}
}

// testContentionInstances is testContention over 8 instances sharing one
// backend, 8 goroutines each.
func (s *suite) testContentionInstances(t *testing.T) {
	if s.c.Instances == nil {
		t.Skip("storetest: Config.Instances is nil")
	}
	for _, a := range algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			stores := s.instances(t, NewClock(Start), 8)
			var all []quota.Store
			for _, st := range stores {
				for range 8 {
					all = append(all, st)
				}
			}
			s.contend(t, a, all)
		})
	}
}

func (s *suite) instances(t *testing.T, clock *Clock, n int) []quota.Store {
	stores := s.c.Instances(t, clock.Now, n)
	require.Len(t, stores, n, "storetest: Config.Instances returned the wrong number of stores")
	for i, st := range stores {
		require.NotNil(t, st, "storetest: Config.Instances returned a nil store %d", i)
	}
	return stores
}

// contend runs one goroutine per element of stores, all taking from a
// global and a per-category limit at once, and checks the exact counts.
func (s *suite) contend(t *testing.T, a quota.Algorithm, stores []quota.Store) {
	const (
		globalRate   = 25
		categoryRate = 10
		categories   = 4
		rounds       = 3
	)
	scope := s.scope(t, "")
	global := quota.Bucket{Limit: limitOf(a, "global", globalRate, hour)}
	demand := func(cat int) *quota.Demand {
		return &quota.Demand{Scope: scope, Cost: 1, Limits: []quota.Bucket{
			global,
			{Limit: limitOf(a, "category", categoryRate, hour), Key: fmt.Sprintf("c%d", cat)},
		}}
	}
	var (
		mu       sync.Mutex
		admitted [categories]int
		problems []error
	)
	atOnce(len(stores), func(g int) {
		for r := range rounds {
			for i := range categories {
				cat := (g + r + i) % categories
				dec, err := stores[g].Take(t.Context(), demand(cat))
				mu.Lock()
				switch {
				case err != nil:
					problems = append(problems, fmt.Errorf("goroutine %d: category %d: %w", g, cat, err))
				case dec.OK && dec.Delay != 0:
					problems = append(problems, fmt.Errorf("goroutine %d: category %d: granted with Delay %v though MaxWait is 0", g, cat, dec.Delay))
				case dec.OK:
					admitted[cat]++
				case dec.Limit != 0 && dec.Limit != 1 || dec.Reservation != nil:
					problems = append(problems, fmt.Errorf("goroutine %d: category %d: refusal with Limit %d, Reservation %v", g, cat, dec.Limit, dec.Reservation))
				}
				mu.Unlock()
			}
		}
	})
	require.NoError(t, errors.Join(problems...))
	total := 0
	for cat, n := range admitted {
		assert.LessOrEqual(t, n, categoryRate, "category %d admitted", cat)
		total += n
	}
	assert.Equal(t, globalRate, total, "admitted in all (per category: %v)", admitted)
	for cat := range categories {
		dec, err := stores[0].Take(t.Context(), demand(cat))
		require.NoError(t, err)
		assert.False(t, dec.OK, "category %d: a demand after the run was granted", cat)
	}
}

// testConcurrentReservations: many goroutines reserve at once on a frozen
// clock. With one limit, the granted delays must be exactly those of the
// same demands made one after another; with a global and a per-category
// limit, the granted instants must never exceed either limit.
func (s *suite) testConcurrentReservations(t *testing.T) {
	modes := []struct {
		name      string
		instances int
	}{{"one store", 0}, {"instances", 8}}
	for _, mode := range modes {
		for _, a := range algorithms {
			t.Run(mode.name+"/"+a.String(), func(t *testing.T) {
				if mode.instances > 0 && s.c.Instances == nil {
					t.Skip("storetest: Config.Instances is nil")
				}
				t.Parallel()
				clock := NewClock(Start)
				stores := make([]quota.Store, 64)
				if mode.instances > 0 {
					inst := s.instances(t, clock, mode.instances)
					for i := range stores {
						stores[i] = inst[i%len(inst)]
					}
				} else {
					st := s.c.New(t, clock.Now)
					require.NotNil(t, st)
					for i := range stores {
						stores[i] = st
					}
				}
				t.Run("one limit", func(t *testing.T) { s.reserveOne(t, a, stores, clock) })
				t.Run("two limits", func(t *testing.T) { s.reserveTwo(t, a, stores, clock) })
			})
		}
	}
}

// reserveAll runs one goroutine per store, each making perG demands with
// MaxWait of an hour, and returns the decisions in no particular order.
func reserveAll(t *testing.T, stores []quota.Store, perG int, demand func(g, i int) *quota.Demand) ([]*quota.Demand, []quota.Decision) {
	var (
		mu       sync.Mutex
		demands  []*quota.Demand
		decs     []quota.Decision
		problems []error
	)
	atOnce(len(stores), func(g int) {
		for i := range perG {
			d := demand(g, i)
			dec, err := stores[g].Take(t.Context(), d)
			mu.Lock()
			if err != nil {
				problems = append(problems, fmt.Errorf("goroutine %d demand %d: %w", g, i, err))
			} else {
				demands = append(demands, d)
				decs = append(decs, dec)
			}
			mu.Unlock()
		}
	})
	require.NoError(t, errors.Join(problems...))
	return demands, decs
}

// atOnce calls each(g) for g from 0 to n-1, one goroutine each, all
// released together, and waits for them to return.
func atOnce(n int, each func(g int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range n {
		wg.Go(func() {
			<-start
			each(g)
		})
	}
	close(start)
	wg.Wait()
}

func (s *suite) reserveOne(t *testing.T, a quota.Algorithm, stores []quota.Store, clock *Clock) {
	const perG = 4
	d := &quota.Demand{
		Scope: s.scope(t, ""), Cost: 1, MaxWait: hour,
		Limits: []quota.Bucket{{Limit: limitOf(a, "l", 10, sec), Key: "k"}},
	}
	_, decs := reserveAll(t, stores, perG, func(int, int) *quota.Demand { return d })
	var got []time.Duration
	for _, dec := range decs {
		assert.True(t, dec.OK, "a demand was refused: %+v", dec)
		got = append(got, dec.Delay)
	}
	slices.Sort(got)
	m, now := newModel(), clock.Now().UnixMicro()
	var want []time.Duration
	for range len(stores) * perG {
		dec, _, err := m.take(d, now)
		require.NoError(t, err)
		want = append(want, dec.Delay)
	}
	assert.Equal(t, want, got, "sorted delays of %d identical reservations (want: one after another)", len(want))
}

func (s *suite) reserveTwo(t *testing.T, a quota.Algorithm, stores []quota.Store, clock *Clock) {
	const perG, categories = 4, 4
	scope := s.scope(t, "")
	global := limitOf(a, "global", 20, sec)
	category := limitOf(a, "category", 8, sec)
	demands, decs := reserveAll(t, stores, perG, func(g, i int) *quota.Demand {
		return &quota.Demand{Scope: scope, Cost: 1, MaxWait: hour, Limits: []quota.Bucket{
			{Limit: global},
			{Limit: category, Key: fmt.Sprintf("c%d", (g*7+i)%categories)},
		}}
	})
	now := clock.Now().UnixMicro()
	var all []admission
	byCat := map[string][]admission{}
	for i, dec := range decs {
		if !assert.True(t, dec.OK, "a demand was refused: %+v", dec) {
			continue
		}
		adm := admission{at: now + dec.Delay.Microseconds(), cost: 1}
		all = append(all, adm)
		k := demands[i].Limits[1].Key
		byCat[k] = append(byCat[k], adm)
	}
	checkAdmissions(t, "global", global, all)
	for k, adm := range byCat {
		checkAdmissions(t, "category "+k, category, adm)
	}
}
