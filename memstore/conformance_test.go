package memstore_test

import (
	"testing"
	"time"

	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/storetest"
)

// TestMemoryStoreConformance runs the Store conformance suite against the
// in-process store. It has no Instances: a MemoryStore is per process.
func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Config{
		New: func(_ *testing.T, now func() time.Time) quota.Store {
			return memstore.New(memstore.WithClock(now))
		},
	})
}
