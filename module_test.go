package throttle_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A module outside the repository depends on the library and on
// grpcthrottle as a user's would: go mod tidy resolves both with no
// replace but the consumer's own (pointing at this tree, since a release
// is not fetched here), so grpcthrottle's go.mod must require a real
// version of the library and hold no replace of its own.
func TestConsumerModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy and go build in a module of its own")
	}
	t.Parallel()
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	for _, nested := range []string{"grpcthrottle", "examples/github", "examples/metrics", "examples/slack", "bench"} {
		mod, err := os.ReadFile(filepath.Join(root, nested, "go.mod"))
		require.NoError(t, err)
		assert.NotContains(t, string(mod), "replace", "%s/go.mod: development goes through go.work", nested)
		assert.NotContains(t, string(mod), "github.com/quotakit/throttle v0.0.0", "%s/go.mod: requires a release", nested)
	}

	dir := t.TempDir()
	gomod := "module example.com/consumer\n\ngo 1.26.0\n\n" +
		"replace github.com/quotakit/throttle => " + root + "\n\n" +
		"replace github.com/quotakit/throttle/grpcthrottle => " + filepath.Join(root, "grpcthrottle") + "\n"
	main := `package main

import (
	"fmt"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/grpcthrottle"
	"google.golang.org/grpc"
)

func main() {
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name: "api", Limits: []throttle.Limit{{Name: "l", Rate: 10, Per: time.Second}},
	}}})
	if err != nil {
		panic(err)
	}
	_ = grpc.WithUnaryInterceptor(grpcthrottle.UnaryClientInterceptor(lim))
	fmt.Println("ok")
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644))
	seedSums(t, dir, "go.sum", "grpcthrottle/go.sum")
	run := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	run("mod", "tidy")
	assert.Equal(t, "ok\n", run("run", "."))
	// The library resolves to this tree through the consumer's replace,
	// at the version grpcthrottle requires.
	got := run("list", "-m", "github.com/quotakit/throttle")
	assert.Contains(t, got, "=> "+root, got)
}

// The README's quickstart, pasted into a fresh module with no Redis and
// no network (GOPROXY=off: only what building the library put in the
// module cache), prints what the README says it prints.
func TestReadmeQuickstartRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy and go run in a module of its own")
	}
	t.Parallel()
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "## Quickstart\n")
	require.True(t, ok)
	_, program, ok := strings.Cut(section, "```go\n")
	require.True(t, ok)
	program, section, ok = strings.Cut(program, "\n```\n")
	require.True(t, ok)
	require.True(t, strings.HasPrefix(program, "package main\n"), "the quickstart is a whole program")
	_, section, ok = strings.Cut(section, "It prints:\n\n```text\n")
	require.True(t, ok, "the README says what it prints")
	want, _, ok := strings.Cut(section, "```\n")
	require.True(t, ok)

	dir := t.TempDir()
	gomod := "module example.com/quickstart\n\ngo 1.26.0\n\nreplace github.com/quotakit/throttle => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program+"\n"), 0o644))
	seedSums(t, dir, "go.sum")
	run := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
		out, err := cmd.Output()
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		require.NoError(t, err, "go %s:\n%s%s", strings.Join(args, " "), out, stderr)
		return string(out)
	}
	run("mod", "tidy")
	assert.Equal(t, want, run("run", "."))
}

// seedSums writes into dir/go.sum the checksums of the repository's
// go.sum files named, which a user's go.sum would get from the checksum
// database: go mod tidy then needs no network to verify what it finds.
func seedSums(t *testing.T, dir string, sums ...string) {
	t.Helper()
	var all []byte
	for _, f := range sums {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		all = append(all, b...)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), all, 0o644))
}
