package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCallDeadlinesShared: calls made with context.Background within the
// grain of the first share its context and deadline (the first gets its
// whole timeout, the others at most a grain less); a call after the grain
// gets a context of its own; both end with context.DeadlineExceeded. The
// clock that decides sharing is the test's; the deadlines' timers are
// real.
func TestCallDeadlinesShared(t *testing.T) {
	const (
		timeout = 160 * time.Millisecond
		grain   = timeout / 16 // as WithTimeout documents: 15/16 of the timeout at least
	)
	t0 := time.Now()
	now := t0
	s := &Store{timeout: timeout}
	s.deadlines.clock = func() time.Time { return now }

	c1, cancel := s.callContext(context.Background())
	cancel()
	now = t0.Add(grain)
	c2, cancel := s.callContext(context.TODO())
	cancel()
	require.Same(t, c1.(*sharedDeadline), c2.(*sharedDeadline), "calls within the grain share a deadline")
	dl, ok := c2.Deadline()
	require.True(t, ok)
	assert.Equal(t, t0.Add(timeout), dl, "the first call's whole timeout; the second's less the grain")
	assert.NoError(t, c1.Err())
	assert.Nil(t, c1.Value("any"))

	now = t0.Add(grain + 1)
	c3, cancel := s.callContext(context.Background())
	cancel()
	assert.NotSame(t, c1.(*sharedDeadline), c3.(*sharedDeadline), "a call after the grain gets a deadline of its own")
	dl3, _ := c3.Deadline()
	assert.Equal(t, now.Add(timeout), dl3)
	now = t0.Add(grain + 2)
	c4, cancel := s.callContext(context.Background())
	cancel()
	assert.Same(t, c3.(*sharedDeadline), c4.(*sharedDeadline))

	select {
	case <-c1.Done():
	case <-time.After(10 * timeout):
		t.Fatal("the shared deadline never ended its context")
	}
	assert.ErrorIs(t, c1.Err(), context.DeadlineExceeded)
	<-c3.Done()
	assert.ErrorIs(t, c3.Err(), context.DeadlineExceeded)
}

// TestCallContextOwn: a context that can be cancelled or carries values
// gets a context of its own, which keeps both; a sooner deadline of the
// caller's is kept as it is; a non-positive timeout adds none.
func TestCallContextOwn(t *testing.T) {
	type key struct{}
	s := &Store{timeout: time.Minute}

	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	c, cancel := s.callContext(parent)
	defer cancel()
	_, shared := c.(*sharedDeadline)
	assert.False(t, shared)
	assert.Equal(t, "v", c.Value(key{}))
	dl, ok := c.Deadline()
	require.True(t, ok)
	assert.WithinDuration(t, time.Now().Add(time.Minute), dl, 10*time.Second)
	cancelParent()
	<-c.Done()
	assert.ErrorIs(t, c.Err(), context.Canceled)

	soon, cancelSoon := context.WithTimeout(context.Background(), time.Second)
	defer cancelSoon()
	c, cancel = s.callContext(soon)
	defer cancel()
	assert.Equal(t, soon, c)

	s.timeout = 0
	c, cancel = s.callContext(context.Background())
	defer cancel()
	assert.Equal(t, context.Background(), c)
}
