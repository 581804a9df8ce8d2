package faults

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/quota/owner"
	"github.com/sluice-dev/sluice/testkit"
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
		// The os/exec copy goroutines of processes that were waited have
		// ended; every test's own http.Transport is closed by its cleanup.
		if err := testkit.FindLeaks(); err != nil {
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

// long runs the long versions of the scenarios (go test ./faults
// -faults.long -timeout 30m): more keys, more requests, longer phases.
var longRun = flag.Bool("faults.long", false, "run the long versions of the fault scenarios")

// scale is n, or 10 × n with -faults.long.
func scale(n int) int {
	if *longRun {
		return 10 * n
	}
	return n
}

// scaleD is d, or 5 × d with -faults.long.
func scaleD(d time.Duration) time.Duration {
	if *longRun {
		return 5 * d
	}
	return d
}

// callSlack is the fixed slack a budgeted call may take beyond its budget
// (the scheduler, a KV round trip already in flight): 25 ms, plus
// raceSlack under the race detector. A bound never grows with the
// machine's measured lateness: a call taking twice its budget must fail.
const callSlack = 25*time.Millisecond + raceSlack

// failoverBound bounds how long after an owner's kill -9 its partitions
// are served again: the lease TTL (5 s) + 3 s. Measured 3.7–7.7 s on 2
// vCPUs shared with other test runs (-race); a fleet that waited two lease
// TTLs, or never took over, fails.
const failoverBound = owner.DefaultLeaseTTL + 3*time.Second
