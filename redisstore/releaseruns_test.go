package redisstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestAppendReleaseRuns checks take_batch.lua's layout of carried
// releases: grouped by key (groupReleases), one key per run, and per run
// the ids, their number and the channel.
func TestAppendReleaseRuns(t *testing.T) {
	rs := []leaseRelease{
		{key: "c:b", id: "1.1", channel: "n:b"},
		{key: "c:a", id: "2.1", channel: "n:a"},
		{key: "c:b", id: "1.2", channel: "n:b"},
		{key: "c:b", id: "1.3", channel: "n:b"},
	}
	groupReleases(rs)
	keys, args, runs := appendReleaseRuns([]string{"g"}, []any{"x"}, rs)
	assert.Equal(t, 2, runs)
	assert.Equal(t, []string{"g", "c:a", "c:b"}, keys)
	assert.Equal(t, []any{"x", "2.1", 1, "n:a", "1.1", "1.2", "1.3", 3, "n:b"}, args)

	keys, args, runs = appendReleaseRuns(nil, nil, nil)
	assert.Zero(t, runs)
	assert.Empty(t, keys)
	assert.Empty(t, args)
}
