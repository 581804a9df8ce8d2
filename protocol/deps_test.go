package protocol_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStandardLibraryOnly: protocol depends on the standard library only,
// so any Go program can import the contract without the rest of sluice.
func TestStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/sluice-dev/sluice/protocol").Output()
	if err != nil {
		t.Fatalf("go list -deps protocol: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep != "github.com/sluice-dev/sluice/protocol" {
			t.Errorf("protocol links %s: it may import the standard library only", dep)
		}
	}
}
