package redistest

import "syscall"

// sysProcAttr makes the kernel kill a server if the test binary dies
// (a panic, a -timeout, SIGKILL) before its cleanup could run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
