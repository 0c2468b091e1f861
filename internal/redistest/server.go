package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

const (
	// skipEnv, set to "1", turns a missing redis-server into a skip.
	skipEnv = "THROTTLE_SKIP_REDIS"

	// startTimeout bounds the wait for a new server to answer.
	startTimeout = 10 * time.Second

	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 3 * time.Second

	// portAttempts is how many free ports Start tries before giving up.
	portAttempts = 8
)

// errPortTaken reports that the chosen port was taken by someone else
// between choosing it and binding it.
var errPortTaken = errors.New("port taken")

// A Server is one redis-server process on a loopback port. Its methods are
// safe for concurrent use.
type Server struct {
	bin  string
	dir  string
	port int
	conf string   // a config file, read before the arguments (a Sentinel's); "" for none
	args []string // everything but --port

	mu     sync.Mutex
	proc   *process // nil when not running
	paused bool     // proc is suspended by Pause
}

// Start runs redis-server on a free loopback port, in its own directory
// (t.TempDir()), without persistence, and returns once it answers PING. The
// server is stopped in t.Cleanup. Start fails the test if redis-server is not
// on PATH, unless THROTTLE_SKIP_REDIS=1 is set, when it skips it.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return startTest(t, 1, func(bin string, dirs []string) (*Server, error) {
		s := newServer(bin, dirs[0], newConfig(opts).args)
		return s, s.startFresh(nil)
	})
}

// startTest calls start with redis-server's path and n directories from
// t.TempDir, fails the test if start does, and stops what it started in
// t.Cleanup.
func startTest[T interface{ Stop() error }](t testing.TB, n int, start func(bin string, dirs []string) (T, error)) T {
	t.Helper()
	bin := requireBinary(t, "redis-server")
	dirs := make([]string, max(n, 0))
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	v, err := start(bin, dirs)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() {
		if err := v.Stop(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return v
}

// requireBinary finds name on PATH or ends the test.
func requireBinary(t testing.TB, name string) string {
	t.Helper()
	bin, err := findBinary(name)
	if err != nil {
		if os.Getenv(skipEnv) == "1" {
			t.Skipf("redistest: %v (skipping: %s=1)", err, skipEnv)
		}
		t.Fatalf("redistest: %v", err)
	}
	return bin
}

func findBinary(name string) (string, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found: apt-get install -y redis-server (or set %s=1 to skip Redis tests)", name, skipEnv)
	}
	return bin, nil
}

func newServer(bin, dir string, extra []string) *Server {
	args := []string{
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
		// Exit at once on SIGTERM: no save, no wait for lagging replicas.
		"--shutdown-on-sigterm", "nosave", "now",
		// DEBUG SLEEP and friends, for fault tests; loopback only.
		"--enable-debug-command", "local",
	}
	return &Server{bin: bin, dir: dir, args: append(args, extra...)}
}

// startFresh starts the server on a new free port, trying another port if
// the chosen one is taken before redis-server binds it. pickPorts, if not
// nil, chooses the port and appends port-dependent arguments.
func (s *Server) startFresh(pickPorts func() (int, []string, error)) error {
	if pickPorts == nil {
		pickPorts = func() (int, []string, error) {
			ports, err := freePorts(1)
			if err != nil {
				return 0, nil, err
			}
			return ports[0], nil, nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for range portAttempts {
		var port int
		var more []string
		port, more, err = pickPorts()
		if err != nil {
			return err
		}
		s.port = port
		s.args = append(s.args, more...)
		if err = s.launch(); !errors.Is(err, errPortTaken) {
			return err
		}
		s.args = s.args[:len(s.args)-len(more)]
	}
	return err
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// launch starts redis-server on s.port and waits until it answers. The
// caller holds s.mu.
func (s *Server) launch() error {
	args := append([]string{"--port", strconv.Itoa(s.port)}, s.args...)
	if s.conf != "" {
		args = append([]string{s.conf}, args...) // redis-server reads a config file only as its first argument
	}
	p, err := startProcess(s.bin, args, s.logPath())
	if err != nil {
		return err
	}
	if err := s.waitReady(p); err != nil {
		if !p.exited {
			_ = p.kill()
		}
		return err
	}
	s.proc = p
	return nil
}

// waitReady polls until the server answers PING and INFO reports the
// process's own pid (and not that of a stranger holding the port).
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(startTimeout)
	delay := 500 * time.Microsecond
	for {
		if done, err := p.poll(); err != nil {
			return err
		} else if done {
			log := s.logTail()
			if containsFold(log, "address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("redis-server on port %d exited at start (%s); log:\n%s", s.port, p.describe(), log)
		}
		err := probe(s.addrLocked(), p.pid)
		if err == nil {
			return nil
		}
		if errors.Is(err, errPortTaken) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on port %d did not answer within %v: %w; log:\n%s", s.port, startTimeout, err, s.logTail())
		}
		time.Sleep(delay)
		delay = min(2*delay, 10*time.Millisecond)
	}
}

// probe sends PING and INFO server in one round trip.
func probe(addr string, pid int) error {
	c, err := dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.send([]string{"PING"}, []string{"INFO", "server"}); err != nil {
		return err
	}
	pong, err := c.read()
	if err != nil {
		return err
	}
	if pong != "PONG" {
		return fmt.Errorf("PING: got %v", pong)
	}
	v, err := c.read()
	if err != nil {
		return err
	}
	info, _ := v.(string)
	if got, _ := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%w: %s answered by pid %q, not %d", errPortTaken, addr, got, pid)
	}
	return nil
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across [Server.Restart].
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrLocked()
}

func (s *Server) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Dir returns the server's working directory (its log is redis.log there).
func (s *Server) Dir() string { return s.dir }

// Running reports whether the server process is running (it may have been
// stopped or killed).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Stop stops the server (SHUTDOWN NOSAVE NOW, then SIGTERM, then SIGKILL if
// it has not exited after a short grace) and waits for it to exit. Stopping a stopped server does
// nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() error {
	if s.proc == nil {
		return nil
	}
	if err := s.setPausedLocked(false); err != nil {
		return err
	}
	p := s.proc
	s.proc = nil
	// SHUTDOWN exits at once; SIGTERM is only acted on in serverCron,
	// up to 100 ms later. SIGTERM remains the fallback.
	if c, err := dial(s.addrLocked()); err == nil {
		_ = c.send([]string{"SHUTDOWN", "NOSAVE", "NOW"})
		_ = c.c.SetDeadline(time.Now().Add(time.Second))
		_, _ = c.read() // EOF once the server is gone
		_ = c.Close()
	}
	if err := p.terminate(stopGrace); err != nil {
		return fmt.Errorf("stop redis-server on port %d: %w", s.port, err)
	}
	return nil
}

// Kill kills the server with SIGKILL, as a crash would, and waits for it to
// exit. Killing a stopped server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	p := s.proc
	s.proc, s.paused = nil, false // SIGKILL ends a stopped process too
	if err := p.kill(); err != nil {
		return fmt.Errorf("kill redis-server on port %d: %w", s.port, err)
	}
	return nil
}

// Pause suspends the server process with SIGSTOP, as a stalled machine
// (a VM paused by its host, a process swapped out) would: connections stay
// open and new ones are still accepted by the kernel, commands are
// buffered, but nothing is answered until [Server.Resume]. Pausing a
// paused or stopped server does nothing. Stop and Restart resume a paused
// server first, and Kill ends it as it is, so a test that fails while the
// server is paused still cleans up.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setPausedLocked(true)
}

// Resume resumes a server suspended by [Server.Pause] with SIGCONT; it
// then answers what was buffered meanwhile, in order. Resuming a server
// that is not paused does nothing.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setPausedLocked(false)
}

// setPausedLocked pauses (SIGSTOP) or resumes (SIGCONT) a running server;
// a stopped one, or one already so, is left as it is.
func (s *Server) setPausedLocked(paused bool) error {
	if s.proc == nil || s.paused == paused {
		return nil
	}
	signal, verb := s.proc.cont, "resume"
	if paused {
		signal, verb = s.proc.stop, "pause"
	}
	if err := signal(); err != nil {
		return fmt.Errorf("%s redis-server on port %d: %w", verb, s.port, err)
	}
	s.paused = paused
	return nil
}

// Paused reports whether the server is suspended by [Server.Pause].
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// Restart stops the server if it is running and starts it again on the same
// port, with the same arguments and directory, and waits until it answers.
// Data is lost (there is no persistence); a cluster node keeps its identity
// and its view of the cluster from nodes.conf.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		return err
	}
	if err := s.launch(); err != nil {
		return fmt.Errorf("restart redis-server on port %d: %w", s.port, err)
	}
	return nil
}

// Do opens a connection to the server, runs one command and returns its
// reply: a string for simple and bulk strings, an int64 for integers, nil
// for a null, []any for arrays, and a [RedisError] for an error reply. It
// is meant for setup and fault injection (e.g. "DEBUG", "SLEEP", "1"), not
// as a client under test.
func (s *Server) Do(args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("redistest: Do: no command")
	}
	c, err := dial(s.Addr())
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	defer c.Close()
	return c.do(args...)
}

func (s *Server) logPath() string { return s.dir + "/redis.log" }

// logTail returns the end of the server's log, for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const max = 2048
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
