package natsembed_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibrariesDoNotLinkTheServer keeps nats-server out of the packages a
// service imports to call sluice or to use its stores: only natsembed (and
// the binaries and test helpers built on it) may link the server.
func TestLibrariesDoNotLinkTheServer(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("go tool not on PATH: %v", err)
	}
	pkgs := []string{"client", "claims", "quota", "gcra", "cooldown", "events", "kvstore"}
	for _, p := range pkgs {
		cmd := exec.Command("go", "list", "-deps", "github.com/sluice-dev/sluice/"+p)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", p, err)
		}
		for _, dep := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(dep, "github.com/nats-io/nats-server/") {
				t.Errorf("%s links %s: a client or store package must not import the server (use natsembed)", p, dep)
				break
			}
		}
	}
}
