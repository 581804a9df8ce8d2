package testkit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

// startLabel is the pprof label StartTogether puts on each start's
// goroutine, so that a start that times out can be found in the goroutine
// profile and its stack shown.
const startLabel = "testkit.start"

// StartTogether runs start(i, log) for each i below n at once (nodes that
// each wait for a quorum of the others) and returns what they started.
// log is node i's logger: everything at debug level while the nodes
// start, info and above once they all have (and on stderr too with
// SLUICE_TEST_LOG). It fails the test, naming what, as soon as a start
// fails, or when they have not all returned within timeout; either way it
// says of each node that has not returned where its start waits (its
// goroutine's stack) and the tail of its log.
func StartTogether[N any](t T, n int, timeout time.Duration, what string, start func(i int, log *slog.Logger) (N, error)) []N {
	t.Helper()
	out := make([]N, n)
	type result struct {
		i   int
		err error
	}
	results := make(chan result, n)
	logs := make([]*NodeLog, n)
	began := time.Now()
	for i := range out {
		logs[i] = NewNodeLog(fmt.Sprintf("%s %d", what, i))
		go pprof.Do(context.Background(), pprof.Labels(startLabel, logs[i].name), func(context.Context) {
			var err error
			out[i], err = start(i, logs[i].Logger())
			results <- result{i, err}
		})
	}
	deadline := time.After(timeout) // one bound for all of them
	done := make([]bool, n)
	for range out {
		select {
		case r := <-results:
			done[r.i] = true
			if r.err != nil {
				t.Fatalf("%s %d start failed after %s: %v\n%s", what, r.i, time.Since(began).Round(time.Millisecond), r.err, startReport(logs, done))
			}
		case <-deadline:
			t.Fatalf("%s: not all started within %s\n%s", what, timeout, startReport(logs, done))
		}
	}
	for _, l := range logs {
		l.Started()
	}
	return out
}

// startReport says, for each node not done, where its start's goroutine
// is and the tail of its log.
func startReport(logs []*NodeLog, done []bool) string {
	var prof bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&prof, 1)
	var b strings.Builder
	for i, l := range logs {
		if done[i] {
			fmt.Fprintf(&b, "--- %s: started\n", l.name)
			continue
		}
		fmt.Fprintf(&b, "--- %s: still starting; its start waits in:\n%s", l.name, StartStack(prof.String(), l.name))
		fmt.Fprintf(&b, "--- %s: the last lines of its log:\n%s", l.name, l.Tail(40))
	}
	return b.String()
}

// StartStack picks out of a goroutine profile (debug=1: one record per
// stack, with its labels) the stacks of the start labelled name: the
// start's own goroutine, the one that ran StartTogether's start func.
func StartStack(profile, name string) string {
	label := fmt.Sprintf("%q:%q", startLabel, name)
	var b strings.Builder
	for rec := range strings.SplitSeq(profile, "\n\n") {
		if !strings.Contains(rec, label) || !strings.Contains(rec, "testkit.StartTogether") {
			continue
		}
		for line := range strings.SplitSeq(rec, "\n") {
			if f, ok := strings.CutPrefix(line, "#\t"); ok {
				// "0x4a2b3c\tpkg.Func+0x1f\tfile.go:12": the function and
				// where, without the addresses.
				if parts := strings.Fields(f); len(parts) >= 3 {
					fn, _, _ := strings.Cut(parts[1], "+0x")
					fmt.Fprintf(&b, "    %s %s\n", fn, parts[2])
				}
			}
		}
	}
	if b.Len() == 0 {
		return "    (its goroutine was not found in the goroutine profile)\n"
	}
	return b.String()
}

// NodeLog is a logger for one node a test starts that keeps its last
// lines (nodeLogLines) for a failure to show: at debug level until
// Started, info and above after.
type NodeLog struct {
	name  string
	level slog.LevelVar
	mu    sync.Mutex
	lines []string
	next  int // where the next line goes once lines is full
	part  []byte
}

// nodeLogLines is how many lines a NodeLog keeps.
const nodeLogLines = 200

// NewNodeLog makes the log of the node called name.
func NewNodeLog(name string) *NodeLog {
	l := &NodeLog{name: name}
	l.level.Set(slog.LevelDebug)
	return l
}

// Logger is a logger writing to l (and, with SLUICE_TEST_LOG, to stderr),
// each line tagged with the node's name.
func (l *NodeLog) Logger() *slog.Logger {
	var h slog.Handler = slog.NewTextHandler(l, &slog.HandlerOptions{Level: &l.level})
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		h = teeHandler{h, slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: &l.level})}
	}
	return slog.New(h).With("node", l.name)
}

// Started raises the level to info: the start is over.
func (l *NodeLog) Started() { l.level.Set(slog.LevelInfo) }

// Write keeps p's lines.
func (l *NodeLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		line := string(l.part[:i])
		l.part = l.part[i+1:]
		if len(l.lines) < nodeLogLines {
			l.lines = append(l.lines, line)
			continue
		}
		l.lines[l.next] = line
		l.next = (l.next + 1) % nodeLogLines
	}
	return len(p), nil
}

// Tail is the last n lines kept, oldest first, each indented.
func (l *NodeLog) Tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ordered := append(append([]string(nil), l.lines[l.next:]...), l.lines[:l.next]...)
	if len(ordered) > n {
		ordered = ordered[len(ordered)-n:]
	}
	if len(ordered) == 0 {
		return "    (nothing logged)\n"
	}
	return "    " + strings.Join(ordered, "\n    ") + "\n"
}

// teeHandler sends every record to both handlers.
type teeHandler struct{ a, b slog.Handler }

func (h teeHandler) Enabled(ctx context.Context, lv slog.Level) bool {
	return h.a.Enabled(ctx, lv) || h.b.Enabled(ctx, lv)
}

func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.a.Enabled(ctx, r.Level) {
		_ = h.a.Handle(ctx, r.Clone())
	}
	if h.b.Enabled(ctx, r.Level) {
		return h.b.Handle(ctx, r)
	}
	return nil
}

func (h teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{h.a.WithAttrs(as), h.b.WithAttrs(as)}
}

func (h teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{h.a.WithGroup(name), h.b.WithGroup(name)}
}
