// Package cpuburn saturates the machine's CPUs for a test, as a busy
// shared host does: it starts spinning processes beside the test's own.
//
// A burner is the test binary itself, started again with an environment
// variable that this package's init reads: a test binary that imports
// cpuburn spins instead of running its tests. It ends when killed (Start's
// kill, or the test's cleanup), once the process that started it is gone,
// or after two minutes, so a test killed before its cleanup leaves nothing
// spinning.
package cpuburn

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// env, set to the parent's pid, makes a test binary a burner.
const env = "THROTTLE_CPUBURN_PARENT"

// Start starts perCore spinning processes per CPU, each with GOMAXPROCS
// 1, and kills them in t.Cleanup or when kill is called (more than once
// is fine).
func Start(t testing.TB, perCore int) (kill func()) {
	t.Helper()
	var cmds []*exec.Cmd
	var once sync.Once
	kill = func() {
		once.Do(func() {
			for _, cmd := range cmds {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
	}
	t.Cleanup(kill)
	for range perCore * runtime.NumCPU() {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env+"="+strconv.Itoa(os.Getpid()), "GOMAXPROCS=1")
		if err := cmd.Start(); err != nil {
			kill()
			t.Fatalf("cpuburn: starting a burner: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	return kill
}

func init() {
	parent := os.Getenv(env)
	if parent == "" {
		return
	}
	deadline := time.Now().Add(2 * time.Minute)
	sum := 0
	for strconv.Itoa(os.Getppid()) == parent && time.Now().Before(deadline) {
		for i := range 1 << 22 {
			sum += i
		}
	}
	runtime.KeepAlive(sum) // the work is the point: keep the loop
	os.Exit(0)
}
