package redistest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// StartMain starts a [Server] for TestMain, to be shared by all tests of a
// package; call the returned stop function after m.Run (it stops the server
// and removes its directory). If the server cannot start, StartMain prints
// why and exits the test binary with status 1; if redis-server is missing
// and THROTTLE_SKIP_REDIS=1 is set, it prints so and exits with status 0,
// skipping the package. See the package documentation for an example.
func StartMain(opts ...Option) (*Server, func()) {
	return startMain("redistest-", func(bin, dir string) (*Server, error) {
		s := newServer(bin, dir, newConfig(opts).args)
		return s, s.startFresh(nil)
	})
}

// startMain calls start with redis-server's path and a new temporary
// directory named after pattern. If start fails, it removes the directory
// and exits the test binary; otherwise it returns what start started and a
// function that stops it and removes the directory.
func startMain[T interface{ Stop() error }](pattern string, start func(bin, dir string) (T, error)) (T, func()) {
	bin := mainBinary("redis-server")
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		mainFatal(err)
	}
	v, err := start(bin, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		mainFatal(err)
	}
	return v, func() {
		if err := v.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: %v\n", err)
		}
		_ = os.RemoveAll(dir)
	}
}

// mainBinary finds name on PATH or exits the test binary.
func mainBinary(name string) string {
	bin, err := findBinary(name)
	if err != nil {
		if os.Getenv(skipEnv) == "1" {
			fmt.Fprintf(os.Stderr, "redistest: %v; skipping package (%s=1)\n", err, skipEnv)
			os.Exit(0)
		}
		mainFatal(err)
	}
	return bin
}

func mainFatal(err error) {
	fmt.Fprintf(os.Stderr, "redistest: %v\n", err)
	os.Exit(1)
}

var prefixSeq atomic.Uint64

// Prefix returns a key prefix unique to this call within the test binary,
// built from the test's name, e.g. "TestTake/burst#3:". Tests that share a
// server use it instead of flushing the database, so they can run in
// parallel. The prefix contains no '{' or '}', so it never forms a Cluster
// hash tag of its own.
func Prefix(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r == '{' || r == '}' || r == ' ' || r < 0x20:
			return '_'
		}
		return r
	}, t.Name())
	return name + "#" + strconv.FormatUint(prefixSeq.Add(1), 10) + ":"
}
