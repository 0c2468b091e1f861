package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is a started child. It is reaped with wait4 directly, polled
// rather than waited on in a goroutine, so a running server leaves no
// goroutine for goleak to report.
type process struct {
	pid    int
	os     *os.Process
	exited bool
	status syscall.WaitStatus
}

func startProcess(bin string, args []string, logPath string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(bin, args...)
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return &process{pid: cmd.Process.Pid, os: cmd.Process}, nil
}

// poll reaps the process if it has exited, without blocking.
func (p *process) poll() (bool, error) {
	return p.wait(syscall.WNOHANG)
}

func (p *process) wait(options int) (bool, error) {
	if p.exited {
		return true, nil
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(p.pid, &ws, options, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("wait for pid %d: %w", p.pid, err)
		}
		if pid != p.pid {
			return false, nil
		}
		p.exited, p.status = true, ws
		_ = p.os.Release()
		return true, nil
	}
}

// kill sends SIGKILL and reaps the process.
func (p *process) kill() error {
	if p.exited {
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL pid %d: %w", p.pid, err)
	}
	_, err := p.wait(0)
	return err
}

// stop suspends the process (SIGSTOP), as a machine that stalls would:
// it keeps its sockets, and the kernel still accepts connections and
// buffers commands for it, but nothing is answered.
func (p *process) stop() error { return p.signal(syscall.SIGSTOP) }

// cont resumes a process suspended by stop (SIGCONT).
func (p *process) cont() error { return p.signal(syscall.SIGCONT) }

func (p *process) signal(sig syscall.Signal) error {
	if p.exited {
		return nil
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%v pid %d: %w", sig, p.pid, err)
	}
	return nil
}

// terminate sends SIGTERM, waits up to grace for the process to exit, then
// kills it.
func (p *process) terminate(grace time.Duration) error {
	if p.exited {
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGTERM pid %d: %w", p.pid, err)
	}
	deadline := time.Now().Add(grace)
	delay := 200 * time.Microsecond
	for time.Now().Before(deadline) {
		if done, err := p.poll(); err != nil || done {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, 5*time.Millisecond)
	}
	return p.kill()
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// describe says how an exited process ended.
func (p *process) describe() string {
	switch {
	case !p.exited:
		return "running"
	case p.status.Signaled():
		return "killed by " + p.status.Signal().String()
	default:
		return fmt.Sprintf("exit status %d", p.status.ExitStatus())
	}
}
