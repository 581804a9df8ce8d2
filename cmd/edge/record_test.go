package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/testkit"
)

// runningEdge is an edge run in process by run, on a data dir.
type runningEdge struct {
	url    string
	stderr *testkit.LogBuffer
	hup    chan os.Signal // a send is a SIGHUP (a reload)
	cancel context.CancelFunc
	done   chan struct{} // closed once run returned code
	code   int
}

// runEdge starts run with the data dir and extra flags; ready waits for
// /readyz 200 (false: the caller expects it to exit).
func runEdge(t *testing.T, data string, ready bool, extra ...string) *runningEdge {
	t.Helper()
	port := testkit.FreePort(t)
	e := &runningEdge{url: fmt.Sprintf("http://127.0.0.1:%d", port), stderr: &testkit.LogBuffer{}, hup: make(chan os.Signal, 1), done: make(chan struct{})}
	args := append([]string{"--data-dir", data, "--http-addr", fmt.Sprintf("127.0.0.1:%d", port), "--nats-listen", "off",
		"--partitions", "4", "--log-level", "warn"}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.code = run(ctx, args, func(string) string { return "" }, e.stderr, e.hup); close(e.done) }()
	t.Cleanup(func() { cancel(); <-e.done })
	if !ready {
		return e
	}
	if err := testkit.WaitHTTP(e.url+"/readyz", 30*time.Second); err != nil {
		t.Fatalf("edge not ready: %v\n%s", err, e.stderr.String())
	}
	return e
}

// stop ends a ready edge and wants exit status 0.
func (e *runningEdge) stop(t *testing.T) {
	t.Helper()
	e.cancel()
	<-e.done
	if e.code != 0 {
		t.Fatalf("exit status %d\n%s", e.code, e.stderr.String())
	}
}

// exit waits for an edge that must refuse to start.
func (e *runningEdge) exit(t *testing.T) (int, string) {
	t.Helper()
	select {
	case <-e.done:
		lines := strings.Split(strings.TrimSpace(e.stderr.String()), "\n")
		return e.code, lines[len(lines)-1]
	case <-time.After(30 * time.Second):
		t.Fatalf("the edge did not exit\n%s", e.stderr.String())
		return 0, ""
	}
}

func postHooks(t *testing.T, base string, n int) {
	t.Helper()
	for i := range n {
		r := testkit.HTTP(t, "POST", base+"/v1/hooks/acme/src", fmt.Appendf(nil, `{"i":%d}`, i), map[string]string{"Content-Type": "application/json"})
		if r.Code != 202 {
			t.Fatalf("hook %d: status %d", i, r.Code)
		}
	}
}

// A node whose data dir lost a stream it had made durable (or the tail of
// one) refuses to start, saying what is missing and how to proceed, until
// it is started once with --accept-data-loss.
func TestRefusesToComeUpEmpty(t *testing.T) {
	data := t.TempDir()
	e := runEdge(t, data, true)
	postHooks(t, e.url, 20)
	e.stop(t)
	rec, ok, err := durability.ReadRecord(filepath.Join(data, durability.RecordFile))
	if err != nil || !ok || rec.Streams["HOOKS"] < 20 {
		t.Fatalf("record after 20 hooks: %+v %v %v", rec, ok, err)
	}
	streams := filepath.Join(data, "jetstream", "jetstream", "$G", "streams")

	// The HOOKS stream's directory gone (as nats-server drops a stream
	// whose meta.inf a power cut emptied).
	if err := os.RemoveAll(filepath.Join(streams, "HOOKS")); err != nil {
		t.Fatal(err)
	}
	code, last := runEdge(t, data, false).exit(t)
	if code == 0 || !strings.Contains(last, "stream HOOKS is missing") || !strings.Contains(last, "--accept-data-loss=true") {
		t.Fatalf("exit %d, last line %q: want a refusal naming HOOKS and --accept-data-loss", code, last)
	}

	// Accepted: it starts on what is left, and the record is rewritten,
	// so the next start needs no flag.
	e = runEdge(t, data, true, "--accept-data-loss=true")
	postHooks(t, e.url, 5)
	e.stop(t)
	e = runEdge(t, data, true)
	e.stop(t)

	// A stream shorter than recorded: its blocks emptied.
	msgs := filepath.Join(streams, "HOOKS", "msgs")
	ents, err := os.ReadDir(msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		p := filepath.Join(msgs, en.Name())
		if strings.HasSuffix(en.Name(), ".blk") {
			err = os.Truncate(p, 0)
		} else {
			err = os.Remove(p) // index.db: rebuilt from the blocks
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	code, last = runEdge(t, data, false).exit(t)
	if code == 0 || !strings.Contains(last, "stream HOOKS ends at sequence") || !strings.Contains(last, "--accept-data-loss=true") {
		t.Fatalf("exit %d, last line %q: want a refusal naming the short HOOKS", code, last)
	}
}
