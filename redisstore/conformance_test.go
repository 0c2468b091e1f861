package redisstore_test

import (
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
)

func TestConformance(t *testing.T) {
	prefix := redistest.Prefix(t)
	storetest.Run(t, storetest.Config{
		New: func(t *testing.T, now func() time.Time) throttle.Store {
			return newStore(t, prefix, redisstore.WithNow(now))
		},
		Instances: func(t *testing.T, now func() time.Time, n int) []throttle.Store {
			ss := make([]throttle.Store, n)
			for i := range ss {
				ss[i] = newStore(t, prefix, redisstore.WithNow(now))
			}
			return ss
		},
	})
}
