package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCommandsDoNotLinkTestkit keeps the bench's commands (this one and
// ./floor-server) off the library's test helpers: what they measure goes
// through the library's packages, and the measuring itself through
// internal/footprint, not through testkit.
func TestCommandsDoNotLinkTestkit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "github.com/sluice-dev/sluice/testkit" || strings.HasPrefix(dep, "github.com/sluice-dev/sluice/testkit/") {
			t.Errorf("the bench links %s", dep)
		}
	}
}
