package redistest_test

import (
	"fmt"
	"runtime"
	"testing"
)

// fakeTB records Fatalf and Skipf instead of ending the real test. Like
// testing.T, it ends the calling goroutine, which must therefore not be the
// test's own.
type fakeTB struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
