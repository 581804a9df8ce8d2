package testkit_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/testkit"
)

// waitForPeer blocks until release is closed: a start waiting for
// something that does not come, under a name its stack shows.
func waitForPeer(release <-chan struct{}) { <-release }

// TestStartTogetherSaysWhereAStartWaits: a start that times out fails
// the test saying, of each node still starting, where its goroutine
// waits and the last lines it logged, and of the others that they
// started.
func TestStartTogetherSaysWhereAStartWaits(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := testkit.NewStandalone()
	defer s.Close()
	msg := fatal(func() {
		testkit.StartTogether(s, 2, 300*time.Millisecond, "peer", func(i int, log *slog.Logger) (int, error) {
			log.Debug("starting", "i", i)
			if i == 1 {
				log.Info("waiting for the meta leader")
				waitForPeer(release)
			}
			return i, nil
		})
	})
	for _, want := range []string{
		"peer: not all started within 300ms",
		"--- peer 0: started",
		"--- peer 1: still starting; its start waits in:\n    github.com/sluice-dev/sluice/testkit_test.waitForPeer ",
		"--- peer 1: the last lines of its log:",
		`msg=starting node="peer 1" i=1`,
		`level=INFO msg="waiting for the meta leader" node="peer 1"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "--- peer 0: the last lines") {
		t.Errorf("the failure shows the log of a node that started:\n%s", msg)
	}
}

// TestStartTogetherFailsAtTheFirstError: a start that fails fails the
// test at once with its error, not once the others have timed out.
func TestStartTogetherFailsAtTheFirstError(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := testkit.NewStandalone()
	defer s.Close()
	began := time.Now()
	msg := fatal(func() {
		testkit.StartTogether(s, 2, time.Minute, "peer", func(i int, _ *slog.Logger) (int, error) {
			if i == 0 {
				return 0, errors.New("port 4222 in use")
			}
			waitForPeer(release)
			return i, nil
		})
	})
	if !strings.Contains(msg, "peer 0 start failed after") || !strings.Contains(msg, "port 4222 in use") || !strings.Contains(msg, "--- peer 1: still starting") {
		t.Errorf("the failure: %s", msg)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("failed after %v, want at once", d)
	}
}

// TestNodeLogKeepsTheLastLines: a node log keeps its last lines only,
// at debug level until Started.
func TestNodeLogKeepsTheLastLines(t *testing.T) {
	l := testkit.NewNodeLog("n")
	log := l.Logger()
	for i := range 500 {
		log.Debug(fmt.Sprintf("line %d", i))
	}
	tail := l.Tail(3)
	if !strings.Contains(tail, "line 497") || !strings.Contains(tail, "line 499") || strings.Contains(tail, "line 496") {
		t.Fatalf("tail: %s", tail)
	}
	l.Started()
	log.Debug("after")
	log.Info("an info line")
	if tail := l.Tail(2); strings.Contains(tail, "after") || !strings.Contains(tail, "an info line") {
		t.Fatalf("tail after Started: %s", tail)
	}
}

// fatal runs f and returns the message its Standalone's Fatalf panicked
// with ("" if none).
func fatal(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}
