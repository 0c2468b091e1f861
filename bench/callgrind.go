package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The guard's instruction counts: Redis's own work per decision of the
// single-call rows, counted by valgrind's callgrind in a redis-server of
// its own, one decision at a time. Unlike a time, an instruction count
// does not move with the machine's load, so it shows a change of a few
// percent in what the scripts do, which load hides in every timed
// figure. Run only when valgrind, callgrind_control and
// callgrind_annotate are installed.

// callgrindCalls is how many decisions of each contender are counted.
const callgrindCalls = 1000

// haveCallgrind reports whether the tools the count needs are installed.
func haveCallgrind() bool {
	for _, tool := range []string{"valgrind", "callgrind_control", "callgrind_annotate"} {
		if _, err := exec.LookPath(tool); err != nil {
			return false
		}
	}
	return true
}

// countInstructions starts redis-server under callgrind and returns, by
// index of cts (made by mk on a client of that server), the instructions
// redis-server ran per decision: its whole process (event loop, parsing,
// the script, the reply), less serverCron's, which runs by the wall
// clock (and here once a second, hz 1).
func countInstructions(ctx context.Context, mk func(*redis.Client) ([]contender, error), use []int) (map[int]float64, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "guard-callgrind")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "cg.%p"),
		bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--hz", "1", "--dynamic-hz", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			break
		}
		if time.Since(start) > 30*time.Second {
			return nil, errors.New("callgrind: redis-server did not start")
		}
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4, ReadTimeout: time.Minute})
	defer c.Close()
	cts, err := mk(c)
	if err != nil {
		return nil, err
	}
	control := func(arg string) error {
		out, err := exec.CommandContext(ctx, "callgrind_control", arg, pid).CombinedOutput()
		if err != nil {
			return fmt.Errorf("callgrind_control %s: %w: %s", arg, err, out)
		}
		return nil
	}
	got := map[int]float64{}
	for _, i := range use {
		for range 100 { // warm up: the script loaded, the key made
			if _, _, err := cts[i].decide(ctx); err != nil {
				return nil, fmt.Errorf("%s: %w", cts[i].name, err)
			}
		}
		if err := control("-z"); err != nil {
			return nil, err
		}
		for range callgrindCalls {
			if ok, _, err := cts[i].decide(ctx); err != nil || !ok {
				return nil, fmt.Errorf("%s: ok=%v, %v", cts[i].name, ok, err)
			}
		}
		before, _ := filepath.Glob(filepath.Join(dir, "cg.*"))
		if err := control("-d"); err != nil {
			return nil, err
		}
		ir, err := newestTotal(dir, len(before))
		if err != nil {
			return nil, err
		}
		got[i] = float64(ir) / callgrindCalls
	}
	return got, nil
}

// newestTotal waits for callgrind's dump number n+1 in dir and returns
// the instructions it counts.
func newestTotal(dir string, n int) (int64, error) {
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(50 * time.Millisecond) {
		files, _ := filepath.Glob(filepath.Join(dir, "cg.*"))
		if len(files) <= n {
			continue
		}
		sort.Slice(files, func(a, b int) bool {
			fa, _ := os.Stat(files[a])
			fb, _ := os.Stat(files[b])
			return fa.ModTime().After(fb.ModTime())
		})
		if ir, ok := dumpTotal(files[0]); ok {
			return ir - cronInstructions(files[0]), nil
		}
	}
	return 0, errors.New("callgrind: no dump")
}

// cronInstructions returns the instructions of serverCron in the dump
// name, its callees included (callgrind_annotate), or 0 when they cannot
// be read. serverCron runs by the wall clock, so more of it falls in a
// count made on a slower or busier machine.
func cronInstructions(name string) int64 {
	out, err := exec.Command("callgrind_annotate", "--inclusive=yes", name).Output()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, ":serverCron ") {
			n, err := strconv.ParseInt(strings.ReplaceAll(strings.Fields(line)[0], ",", ""), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// dumpTotal reads the "summary:" or "totals:" line of a callgrind dump.
func dumpTotal(name string) (int64, bool) {
	f, err := os.Open(name)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, p := range []string{"summary:", "totals:"} {
			if v, ok := strings.CutPrefix(sc.Text(), p); ok {
				n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}
