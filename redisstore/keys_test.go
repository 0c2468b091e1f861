package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostile returns request-derived values that try to leave the key layout:
// braces that would form another hash tag, separators, and 10 KB of data.
func hostile() (scopes, keys []string) {
	big := strings.Repeat("{x}:", 2560) // 10 KB
	scopes = []string{"a}b", "{a}", "a:b}:g:l:k", "%7D", "", big}
	keys = []string{"k", "}{", "{tag}", ":p:x", big}
	return scopes, keys
}

// exercise makes the store write every kind of key for scope and key:
// each algorithm (granted, reserved and cancelled), a pause, and a replay
// id.
func exercise(t *testing.T, s quota.Store, scope, key string) {
	t.Helper()
	c := ctx(t)
	var bs []quota.Bucket
	for i, a := range []quota.Algorithm{quota.GCRA, quota.FixedWindow, quota.SlidingLog, quota.SlidingWindow} {
		bs = append(bs, quota.Bucket{Limit: quota.Limit{Name: "l" + string(rune('0'+i)), Rate: 2, Per: time.Second, Algorithm: a}, Key: key})
	}
	bs = append(bs, quota.Bucket{Limit: quota.Limit{Name: "c", Rate: 5, Per: time.Minute, Algorithm: quota.Concurrency}, Key: key})
	require.NoError(t, s.Pause(c, scope, key, time.Second))
	d := &quota.Demand{Scope: scope, Limits: bs, Pauses: []string{key}, Cost: 1, MaxWait: 5 * time.Second}
	for range 3 {
		dec, err := s.Take(c, d)
		require.NoError(t, err)
		require.True(t, dec.OK)
		require.Positive(t, dec.Delay) // the pause, then a reservation
	}
	dec, err := s.Take(c, d)
	require.NoError(t, err)
	require.True(t, dec.OK)
	require.NoError(t, s.Cancel(c, dec.Reservation))
	if st, ok := s.(quota.Settler); ok {
		dec, err := s.Take(c, d)
		require.NoError(t, err)
		require.True(t, dec.OK)
		require.NoError(t, st.Settle(c, dec.Reservation, []int{2, 2, 2, 2, 2})) // a settlement key
	}
	// Fair shares: the active tenants, a tenant's share clock, and a claim
	// (of a second tenant, refused with a headroom).
	share := quota.Bucket{Limit: quota.Limit{Name: "t", Rate: 2, Per: time.Second}, Key: key, Tenant: key}
	for range 2 {
		dec, err := s.Take(c, &quota.Demand{Scope: scope, Limits: []quota.Bucket{share}, Cost: 1})
		require.NoError(t, err)
		require.True(t, dec.OK)
	}
	share.Tenant, share.Headroom = key+"2", 1
	dec, err = s.Take(c, &quota.Demand{Scope: scope, Limits: []quota.Bucket{share}, Cost: 1, MaxWait: 5 * time.Second})
	require.NoError(t, err)
	require.False(t, dec.OK)
	// A class noted on a window limit (quota.Bucket.Noted): its notes.
	noted := quota.Bucket{Limit: quota.Limit{Name: "o", Rate: 2, Per: time.Second, Algorithm: quota.SlidingWindow}, Key: key, Classed: true}
	_, err = s.Take(c, &quota.Demand{Scope: scope, Limits: []quota.Bucket{noted}, Cost: 1})
	require.NoError(t, err)
	if ls, ok := s.(quota.LeaseStore); ok {
		dec, err := s.Take(c, d)
		require.NoError(t, err)
		require.True(t, dec.OK)
		claim, err := ls.Claim(c, dec.Reservation) // a reservation's slot is taken by its claim
		require.NoError(t, err)
		require.True(t, claim.OK)
		require.NoError(t, ls.Renew(c, claim.Reservation))
		require.NoError(t, ls.Release(c, claim.Reservation))
	}
}

// escapeTag is the store's escaping of a scope inside its hash tag.
func escapeTag(s string) string {
	if s == "" {
		return "%"
	}
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(s)
}

// checkLayout checks every key under prefix on the given nodes: it belongs
// to one of the scopes, lies in that scope's slot, and has a TTL.
func checkLayout(t *testing.T, nodes []*redis.Client, prefix string, scopes []string, cluster bool) {
	t.Helper()
	c := context.Background()
	seen := map[string]int{}
	for _, n := range nodes {
		var all []string
		iter := n.Scan(c, 0, prefix+"*", 1000).Iterator()
		for iter.Next(c) {
			all = append(all, iter.Val())
		}
		require.NoError(t, iter.Err())
		for _, k := range all {
			rest, ok := strings.CutPrefix(k, prefix+"v1:{")
			require.True(t, ok, "key %.80q outside the layout", k)
			tag, tail, ok := strings.Cut(rest, "}:")
			require.True(t, ok, "key %.80q has no tag", k)
			found := false
			for _, s := range scopes {
				if escapeTag(s) == tag {
					found = true
					seen[s]++
				}
			}
			assert.True(t, found, "key %.80q: tag %.40q is no scope's", k, tag)
			assert.NotContains(t, tag, "{")
			assert.Contains(t, []string{"g:", "f:", "l:", "w:", "c:", "p:", "r:", "s:", "zg", "kg", "eg", "hw"}, tail[:2], "key %.80q", k)
			if cluster {
				slot, err := n.ClusterKeySlot(c, k).Result()
				require.NoError(t, err)
				assert.Equal(t, int64(redistest.Slot("{"+tag+"}")), slot, "key %.80q", k)
			}
			// -1: no TTL; -2: gone since the scan (a pause ended).
			ttl, err := n.PTTL(c, k).Result()
			require.NoError(t, err)
			assert.NotEqual(t, time.Duration(-1), ttl, "key %.80q has no TTL", k)
		}
	}
	for _, s := range scopes {
		assert.Positive(t, seen[s], "no keys for scope %.40q", s)
	}
}

func TestKeyLayout(t *testing.T) {
	prefix := redistest.Prefix(t)
	s := newStore(t, prefix)
	scopes, keys := hostile()
	for _, sc := range scopes {
		for _, k := range keys {
			exercise(t, s, sc, k)
		}
	}
	checkLayout(t, []*redis.Client{newClient(t, srv.Addr())}, prefix, scopes, false)

	// Scopes that would share a tag unescaped keep separate counters.
	d := func(scope string) *quota.Demand { return gcraDemand(scope, 1) }
	for _, sc := range []string{"a", "a}b", "a}"} {
		dec, err := s.Take(ctx(t), d(sc))
		require.NoError(t, err)
		assert.True(t, dec.OK, "scope %q", sc)
	}
}
