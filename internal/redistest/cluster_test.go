package redistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle/internal/redistest"
)

func newClusterClient(t *testing.T, c *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// keyPerMaster returns, for each master i, a key whose slot lies in
// master i's range.
func keyPerMaster(t *testing.T, masters int) []string {
	t.Helper()
	keys := make([]string, masters)
	found := 0
	for i := 0; found < masters; i++ {
		k := fmt.Sprintf("k%d", i)
		m := redistest.Slot(k) * masters / redistest.Slots
		if keys[m] == "" {
			keys[m] = k
			found++
		}
	}
	return keys
}

func TestSlot(t *testing.T) {
	t.Parallel()
	// Expected values from CLUSTER KEYSLOT.
	tests := []struct {
		key  string
		want int
	}{
		{"", 0},
		{"foo", 12182},
		{"bar", 5061},
		{"123456789", 12739},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", 8363},
		{"foo{{bar}}zap", 4015},
		{"foo{bar}{zap}", 5061},
	}
	s := redistest.Start(t)
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			assert.Equal(t, tt.want, redistest.Slot(tt.key))
			got, err := s.Do("CLUSTER", "KEYSLOT", tt.key)
			if err == nil { // CLUSTER KEYSLOT works without cluster mode
				assert.Equal(t, int64(tt.want), got)
			}
		})
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t, 3, 1)
	require.Len(t, c.Nodes(), 6)
	require.Len(t, c.Masters(), 3)
	assert.Len(t, c.Addrs(), 6)

	cc := newClusterClient(t, c)
	for i, key := range keyPerMaster(t, 3) {
		master := c.Masters()[i]
		t.Run(fmt.Sprintf("master %d", i), func(t *testing.T) {
			require.NoError(t, cc.Set(ctx, key, "v", 0).Err())

			owner, err := c.Owner(key)
			require.NoError(t, err)
			assert.Equal(t, master.ID, owner.ID)
			got, err := master.Do("GET", key)
			require.NoError(t, err)
			assert.Equal(t, "v", got, "the key is on master %d itself", i)

			replica := c.Replicas(i)[0]
			acked, err := master.Do("WAIT", "1", "5000")
			require.NoError(t, err)
			assert.Equal(t, int64(1), acked, "the replica acknowledged the write")
			// A replica answers reads of its own slots after READONLY, on
			// the same connection; Do opens one per command, so ask
			// for the key count instead.
			n, err := replica.Do("DBSIZE")
			require.NoError(t, err)
			assert.GreaterOrEqual(t, n, int64(1), "the write reached the replica")
		})
	}
}

func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes several seconds")
	}
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t, 3, 1)
	cc := newClusterClient(t, c)
	key := keyPerMaster(t, 3)[0]
	old := c.Masters()[0]

	require.NoError(t, old.Kill())
	require.NoError(t, c.WaitReady(30*time.Second))
	owner, err := c.Owner(key)
	require.NoError(t, err)
	assert.Equal(t, c.Replicas(0)[0].ID, owner.ID, "the replica took over")
	assert.NoError(t, cc.Set(ctx, key, "after", 0).Err())

	require.NoError(t, old.Restart())
	require.NoError(t, c.WaitReady(30*time.Second))
	role, err := old.Do("ROLE")
	require.NoError(t, err)
	assert.Equal(t, "slave", role.([]any)[0], "the old master rejoins as a replica")
	assert.Equal(t, "after", cc.Get(ctx, key).Val())
}

func TestStartClusterBadArgs(t *testing.T) {
	t.Parallel()
	ft := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.StartCluster(ft, 0, 1)
	}()
	<-done
	assert.True(t, ft.failed)
	assert.Contains(t, ft.msg, "at least 1 master")
}
