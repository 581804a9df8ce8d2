package testkit_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/testkit"
)

// TestFreePortsBelowTheEphemeralRange: the ports are distinct and, where the
// kernel's ephemeral range is known, below it (no outgoing connection can
// take one as its source port before the server binds it).
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	ports := testkit.FreePorts(t, 50)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d returned twice in %v", p, ports)
		}
		seen[p] = true
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Logf("no ephemeral range to check against: %v", err)
		return
	}
	low, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	if low-10000 < 1000 {
		t.Logf("the ephemeral range starts at %d: FreePorts takes the kernel's ports (documented), nothing to check", low)
		return
	}
	for _, p := range ports {
		if p >= low || p < 10000 {
			t.Fatalf("port %d outside [10000, %d): %v", p, low, ports)
		}
	}
}
