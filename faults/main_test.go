package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// binDir holds the binaries built for this test binary run (edge, natsd);
// TestMain creates it and removes it after the tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(
			// Keep-alive connections of http.Transports closed by now, and
			// the os/exec copy goroutines of processes that were waited.
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// binaries builds ./cmd/edge and ./faults/internal/natsd once per test
// binary run (without -race, CGO_ENABLED=0: the flags cmd/edge's own kill
// test uses, so the two share the build cache) and returns their paths.
func binaries(t testing.TB) (edge, natsd string) {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(file))
		cmd := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "./cmd/edge", "./faults/internal/natsd")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "edge"), filepath.Join(binDir, "natsd")
}
