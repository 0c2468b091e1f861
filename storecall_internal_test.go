package throttle

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle/quota"
)

// sharedStore stands for a store other than memstore, so that calls go
// through the breaker; the calls themselves are the test's.
type sharedStore struct {
	quota.Store
}

// TestGuardValueAbandoned: a call that the breaker stops waiting for
// runs on, and what it returns afterwards is dropped rather than written
// where its caller reads (under -race, a closure writing the caller's
// variables, as sendShortens and the anchor calls had, was reported as a
// data race when the fleet's Redis was slow).
func TestGuardValueAbandoned(t *testing.T) {
	lim, err := NewLimiter(Policy{Rules: []Rule{{Name: "r", Limits: []Limit{{Name: "l", Rate: 1, Per: time.Second}}}}},
		WithStore(sharedStore{}), WithBreaker(Breaker{CallTimeout: 20 * time.Millisecond, Failures: 100}))
	require.NoError(t, err)

	release, returned := make(chan struct{}), make(chan struct{})
	v, err := guardValue(context.Background(), lim, func(ctx context.Context) ([]int, error) {
		defer close(returned)
		<-release
		return []int{1, 2, 3}, nil
	})
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the breaker stopped waiting")
	assert.Nil(t, v, "an abandoned call's value is not returned")
	close(release)
	<-returned

	v, err = guardValue(context.Background(), lim, func(ctx context.Context) ([]int, error) {
		return []int{4}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, []int{4}, v, "a call waited for returns its value")
}
