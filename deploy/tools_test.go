package deploy

import (
	"os"
	"os/exec"
	"testing"
)

// tool returns the path of a program a test needs that Go does not bring
// (.ci/run installs it from Debian's packages). Without it the test is
// skipped, saying what to install — except under CI (CI set), where a
// missing tool fails the test: the CI machine must run every check.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (apt-get install %s): CI must run this check", name, pkg)
	}
	t.Skipf("%s is not installed (apt-get install %s; .ci/run does)", name, pkg)
	return ""
}
