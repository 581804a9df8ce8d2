package testkit

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// VerifyTestMain runs m's tests and then, when they passed, fails the run
// if a goroutine they started is still running (FindLeaks).
func VerifyTestMain(m *testing.M, extra ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := FindLeaks(extra...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// FindLeaks reports the goroutines still running besides the caller's
// (goleak.Find, which waits a while for goroutines that are ending). The
// default transport, which any test may use through http.Get, has its idle
// connections closed first; a test's own http.Transport must be closed by
// the test (CloseIdleConnections, a server's Shutdown). There is no blanket
// exception: a goroutine blocked on a socket (internal/poll.runtime_pollWait)
// is a connection or listener nobody closed. extra adds a package's own
// exceptions; each must name one exact function and say why it outlives
// its test.
func FindLeaks(extra ...goleak.Option) error {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return goleak.Find(extra...)
}
