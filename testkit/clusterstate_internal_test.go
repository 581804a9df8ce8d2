package testkit

import (
	"strings"
	"testing"
)

// TestClusterStateSaysWhatEachServerSees: what a timed-out WaitReady
// prints names each server's routes, meta leader and peers, a killed one
// as not running, and the servers' log.
func TestClusterStateSaysWhatEachServerSees(t *testing.T) {
	t.Parallel()
	c := Cluster(t, 3)
	c.Kill(2)
	st := c.state()
	for _, want := range []string{"server 0 (s0): ", " routes, meta leader s", "server 2: not running", "the servers' log"} {
		if !strings.Contains(st, want) {
			t.Errorf("state lacks %q:\n%s", want, st)
		}
	}
}
