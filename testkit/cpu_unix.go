//go:build unix

package testkit

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime is this process's user + system CPU time so far (the in-process
// server's included): a benchmark reports the difference per op.
func CPUTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
