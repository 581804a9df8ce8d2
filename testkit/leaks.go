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
// (goleak.Find). The default transport's idle connections are closed first;
// a test's own http.Transport must be closed by the test. There is no
// blanket exception (a goroutine blocked on a socket is a connection
// nobody closed); extra adds a package's own, each naming one exact
// function and saying why it outlives its test.
func FindLeaks(extra ...goleak.Option) error {
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return goleak.Find(extra...)
}
