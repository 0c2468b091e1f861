package redisstore_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAlgoCodes: the algorithm codes that Go sends (algoCodes in
// scripts.go) are the values of the Lua constants of the same names that
// prologue.lua defines, as Redis evaluates them; the prologue defines no
// other; and every algorithm has a code of its own.
func TestAlgoCodes(t *testing.T) {
	t.Parallel()
	codes, algos := redisstore.AlgoCodes()
	prologue, err := os.ReadFile("prologue.lua")
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^local (GCRA[A-Z_, ]*) = (.*)$`).FindStringSubmatch(string(prologue))
	require.NotNil(t, line, "prologue.lua defines the algorithm constants on one line")
	names := strings.Split(line[1], ", ")
	assert.ElementsMatch(t, names, keysOf(codes), "the constants of prologue.lua and of algoCodes")

	// Redis's own reading of the constants, after the prologue.
	got, err := newClient(t, srv.Addr()).Eval(ctx(t),
		string(prologue)+"return {"+strings.Join(names, ", ")+"}", nil, "", "").StringSlice()
	require.NoError(t, err)
	require.Len(t, got, len(names))
	for i, name := range names {
		assert.Equal(t, codes[name], got[i], "%s in prologue.lua and in algoCodes", name)
	}

	seen := map[string]bool{}
	for a := quota.GCRA; a <= quota.Concurrency; a++ {
		code := redisstore.AlgoCode(a)
		assert.NotEmpty(t, code, "%v has a code", a)
		assert.False(t, seen[code], "%v's code %q is its own", a, code)
		seen[code] = true
	}
	for name, a := range algos {
		assert.Equal(t, codes[name], redisstore.AlgoCode(a), name)
	}
}

// TestScriptsShareTheHeader: every script takes ARGV[1] and ARGV[2] as
// prologue.lua reads them, and reads no other argument before its own
// (ARGV[3] on) in the prologue's place: a resent call is refused by every
// script that a mark may reach, whatever its own arguments.
func TestScriptsShareTheHeader(t *testing.T) {
	t.Parallel()
	c := newClient(t, srv.Addr())
	for _, name := range []string{"take.lua", "take_gcra.lua", "take_batch.lua", "take_window.lua", "cancel.lua"} {
		body, err := os.ReadFile(name)
		require.NoError(t, err)
		assert.NotContains(t, string(body), "redis.call('TIME')", "%s reads the clock in the prologue only", name)
		err = c.Eval(ctx(t), scriptSource(t, name), []string{"{h}x"}, "", "R", "0", "0", "0", "0").Err()
		require.Error(t, err, name)
		assert.True(t, strings.HasPrefix(err.Error(), "RESENT"), "%s: %v", name, err)
	}
}

func keysOf(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
