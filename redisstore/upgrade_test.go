package redisstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeysOfThePreviousVersion pins what this version does with GCRA
// state written by the previous one, which rounded T up to the
// microsecond (keys.go, "GCRA keys come in two kinds"): a limit whose Rate
// divides Per reads and charges the same g: key, whose value is still
// whole microseconds, so old and new instances share it; any other limit
// counts exactly under a G: key and leaves the g: key alone.
func TestKeysOfThePreviousVersion(t *testing.T) {
	c := newClient(t, srv.Addr())
	prefix := redistest.Prefix(t)
	s := newStoreOn(t, c, prefix)
	tm, err := c.Time(ctx(t)).Result()
	require.NoError(t, err)
	// A bucket the previous version left used up: its arrival time 10 s
	// ahead of Redis's clock.
	full := tm.UnixMicro() + 10_000_000
	demand := func(l quota.Limit, wait time.Duration) *quota.Demand {
		return &quota.Demand{Scope: "up", Cost: 1, MaxWait: wait, Limits: []quota.Bucket{{Limit: l, Key: "k"}}}
	}

	exact := quota.Limit{Name: "exact", Rate: 100, Per: time.Second} // T = 10 ms
	old := prefix + "v1:{up}:g:exact:k"
	require.NoError(t, c.Set(ctx(t), old, full, time.Minute).Err())
	dec, err := s.Take(ctx(t), demand(exact, 0))
	require.NoError(t, err)
	assert.False(t, dec.OK, "the previous version's charges count")
	assert.Greater(t, dec.Delay, 8*time.Second)
	dec, err = s.Take(ctx(t), demand(exact, time.Minute))
	require.NoError(t, err)
	require.True(t, dec.OK)
	v, err := c.Get(ctx(t), old).Result()
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(full+10_000, 10), v, "charged on the same key, in whole µs as before")

	awkward := quota.Limit{Name: "awkward", Rate: 3, Per: time.Second} // T = 333333 1/3 µs
	stale := prefix + "v1:{up}:g:awkward:k"
	require.NoError(t, c.Set(ctx(t), stale, full, time.Minute).Err())
	dec, err = s.Take(ctx(t), demand(awkward, 0))
	require.NoError(t, err)
	assert.True(t, dec.OK, "counted apart from the previous version's key")
	assert.Equal(t, time.Duration(0), dec.Delay)
	v, err = c.Get(ctx(t), stale).Result()
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(full, 10), v, "the previous version's key is left alone")
	v, err = c.Get(ctx(t), prefix+"v1:{up}:G:awkward:k").Result()
	require.NoError(t, err)
	assert.Regexp(t, `^\d+:\d+$`, v, "an exact arrival time, with its fraction")
}
