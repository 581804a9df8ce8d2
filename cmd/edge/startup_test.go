package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-dev/sluice/natsembed"
)

// failFastBound is how long a start-up that cannot succeed may take, from
// exec to exit, on a loaded 2-core machine (the causes below are known
// within milliseconds; before, they took 10 s and 30 s).
const failFastBound = 5 * time.Second

// TestStartupFailsFast: a start-up that cannot succeed exits non-zero at
// once, and its last line is the cause — not fx's wiring, not a stack:
// the NATS port in use, --cluster-listen without --routes, --nats-url at
// a server without JetStream, a --data-dir locked by another process.
func TestStartupFailsFast(t *testing.T) {
	bin := buildEdge(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	plain, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	plain.Start()
	defer plain.Shutdown()
	if !plain.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server without JetStream did not start")
	}
	locked := t.TempDir()
	unlock, err := natsembed.LockDir(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	for _, c := range []struct {
		name string
		args []string
		code int
		last string
	}{
		{"nats port in use", []string{"--nats-listen", fmt.Sprintf("127.0.0.1:%d", busyPort)}, 1, fmt.Sprintf("port %d in use", busyPort)},
		{"cluster without routes", []string{"--nats-listen", "off", "--cluster-listen", "127.0.0.1:0"}, 2, "--cluster-listen needs --routes"},
		{"no JetStream", []string{"--nats-url", plain.ClientURL()}, 1, "JetStream not enabled on the server at " + plain.ClientURL()},
		{"locked data dir", []string{"--nats-listen", "off", "--data-dir", locked}, 1, "is locked by another sluice process"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--partitions", "4"}, c.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.code {
				t.Fatalf("exit: %v, want code %d\n%s", err, c.code, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if last := lines[len(lines)-1]; !strings.Contains(last, c.last) {
				t.Errorf("last line %q, want it to say %q\n%s", last, c.last, stderr.String())
			}
			if strings.Contains(stderr.String(), "stack=") || strings.Contains(stderr.String(), "ProvideNATS") {
				t.Errorf("fx's wiring in the output:\n%s", stderr.String())
			}
			if took > failFastBound {
				t.Errorf("took %s, want under %s\n%s", took, failFastBound, stderr.String())
			}
		})
	}
}

// TestFailedStartLeavesNoDataDir: a start that fails — the HTTP port or
// the NATS port in use — removes the --data-dir it created (and the
// parents it created for it), but keeps a data dir that was there before,
// with what it holds.
func TestFailedStartLeavesNoDataDir(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyAddr := busy.Addr().String()
	start := func(dataDir string, args ...string) (int, string) {
		t.Helper()
		var log bytes.Buffer
		args = append([]string{"--data-dir", dataDir, "--partitions", "4"}, args...)
		code := Run(context.Background(), args, func(string) string { return "" }, &log)
		return code, log.String()
	}
	for name, args := range map[string][]string{
		"http port in use": {"--http-addr", busyAddr, "--nats-listen", "off"},
		"nats port in use": {"--http-addr", "127.0.0.1:0", "--nats-listen", busyAddr},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			dataDir := filepath.Join(root, "new", "data")
			if code, log := start(dataDir, args...); code != 1 {
				t.Fatalf("exit %d, want 1\n%s", code, log)
			}
			if _, err := os.Stat(filepath.Join(root, "new")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the failed start left %s behind (%v)", filepath.Join(root, "new"), err)
			}
			old := t.TempDir()
			keep := filepath.Join(old, "keep")
			if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if code, log := start(old, args...); code != 1 {
				t.Fatalf("existing dir: exit %d, want 1\n%s", code, log)
			}
			if _, err := os.Stat(keep); err != nil {
				t.Errorf("the failed start removed what an existing data dir held: %v", err)
			}
		})
	}
}
