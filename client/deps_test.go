package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientImportsOnlyProtocol keeps the Go client a client of the public
// contract: of this module it links package protocol only (never quota,
// claims, kvstore, events, cooldown, authz, tracing, internal/* …), so a
// program calling sluice does not compile its servers' code.
func TestClientImportsOnlyProtocol(t *testing.T) {
	const module = "github.com/sluice-dev/sluice/"
	out, err := exec.Command("go", "list", "-deps", module+"client").Output()
	if err != nil {
		t.Fatalf("go list -deps client: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module) && dep != module+"client" && dep != module+"protocol" {
			t.Errorf("client links %s: it may import only %sprotocol of this module", dep, module)
		}
	}
}
