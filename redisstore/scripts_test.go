package redisstore_test

import (
	"os"
	"path/filepath"
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

// TestScriptsShareTheHeader: every script starts with prologue.lua's
// header: a call whose ARGV[2] is "R" (a resent marked call) is refused
// with RESENT before anything else is read, whatever the script's own
// arguments, and no script reads the clock but through the prologue.
func TestScriptsShareTheHeader(t *testing.T) {
	t.Parallel()
	c := newClient(t, srv.Addr())
	files, err := filepath.Glob("*.lua")
	require.NoError(t, err)
	for _, name := range files {
		if isPart(name) {
			continue
		}
		body, err := os.ReadFile(name)
		require.NoError(t, err)
		assert.NotContains(t, string(body), "'TIME'", "%s reads the clock in the prologue only", name)
		err = c.Eval(ctx(t), scriptSource(t, name), []string{"{h}x"}, "", "R").Err()
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
