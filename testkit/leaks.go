package testkit

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
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
// (goleak.Find). The default transport's idle connections are closed first;
// a test's own http.Transport must be closed by the test. There is no
// blanket exception (a goroutine blocked on a socket is a connection
// nobody closed); extra adds a package's own, each naming one exact
// function and saying why it outlives its test.
func FindLeaks(extra ...goleak.Option) error {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return goleak.Find(extra...)
}

// Blocked reports whether a goroutine is in state (its stack header holds
// it, e.g. "[select" or "[chan receive") with top (e.g.
// "(*limitListener).Accept(") in its top frame: parked where a test waits
// for it to be.
func Blocked(state, top string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, rest, _ := strings.Cut(g, "\n")
		frame, _, _ := strings.Cut(rest, "\n")
		if strings.Contains(header, state) && strings.Contains(frame, top) {
			return true
		}
	}
	return false
}
