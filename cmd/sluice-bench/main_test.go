package main

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runBench runs the bench with args within limit, logs what it wrote and
// fails the test on an error or a temporary directory left behind; it
// returns the report and the bench's output.
func runBench(t *testing.T, limit time.Duration, args ...string) (*report, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var out, log bytes.Buffer
	o, err := parseOptions(args, &log)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{o: o, out: &out, log: &log, self: os.Getpid()}
	rep, err := b.run(ctx)
	tmp := b.tmp
	b.close()
	t.Logf("log:\n%s\nout:\n%s", log.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); tmp != "" && !os.IsNotExist(err) {
		t.Errorf("the bench's directory %s is still there (%v)", tmp, err)
	}
	return rep, out.String()
}
