package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCallDeadlinesShared: calls made with context.Background within the
// grain share one context whose deadline is no later than any of theirs
// and at most a grain earlier; once the grain has passed a new one starts;
// it ends with context.DeadlineExceeded.
func TestCallDeadlinesShared(t *testing.T) {
	const timeout = 160 * time.Millisecond
	grain := deadlineGrain(timeout)
	s := &Store{timeout: timeout}

	start1 := time.Now()
	c1, cancel := s.callContext(context.Background())
	cancel()
	end1 := time.Now()
	start2 := time.Now()
	c2, cancel := s.callContext(context.TODO())
	cancel()
	require.Same(t, c1.(*sharedDeadline), c2.(*sharedDeadline), "calls within the grain share a deadline")
	dl, ok := c2.Deadline()
	require.True(t, ok)
	assert.False(t, dl.After(end1.Add(timeout)), "no call gets more than the timeout")
	assert.False(t, dl.Before(start1.Add(timeout)), "the first call gets the whole timeout")
	assert.False(t, dl.Before(start2.Add(timeout-grain)), "no call gets less than the timeout minus the grain")
	assert.NoError(t, c1.Err())
	assert.Nil(t, c1.Value("any"))

	time.Sleep(grain + grain/2)
	c3, cancel := s.callContext(context.Background())
	cancel()
	assert.NotSame(t, c1.(*sharedDeadline), c3.(*sharedDeadline), "a call after the grain gets a later deadline")
	dl3, _ := c3.Deadline()
	assert.True(t, dl3.After(dl))

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
