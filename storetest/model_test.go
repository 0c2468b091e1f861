package storetest

import (
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRunModel runs the suite against its own reference model, which
// checks the hand-computed tables against the model and the model against
// the tables.
func TestRunModel(t *testing.T) {
	Run(t, Config{
		New: func(_ *testing.T, now func() time.Time) quota.Store {
			return view{m: newModel(), now: now}
		},
		Instances: func(_ *testing.T, now func() time.Time, n int) []quota.Store {
			m := newModel()
			stores := make([]quota.Store, n)
			for i := range stores {
				stores[i] = view{m: m, now: now}
			}
			return stores
		},
	})
}
