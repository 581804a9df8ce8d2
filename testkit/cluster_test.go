package testkit_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// TestClusterRoutesNeverRedialled: every route dial of a starting cluster
// finds its peer listening. Started together, servers found peers not
// listening yet and dialled again a second later, into a cluster already
// formed: the duplicate route that made could drop a live one, and a
// stream's subjects lost their interest on a server for about a second
// (writes through it: no responders).
func TestClusterRoutesNeverRedialled(t *testing.T) {
	t.Parallel()
	for range 3 {
		cl := testkit.Cluster(t, 3)
		if log := cl.ServerLog(); strings.Contains(log, "Error trying to connect to route") {
			t.Fatalf("a route dial of a starting cluster failed (it is retried a second later):\n%s", log)
		}
	}
}

// TestClusterSyncAlways: WithSyncAlways reaches every server's JetStream.
func TestClusterSyncAlways(t *testing.T) {
	t.Parallel()
	cl := testkit.Cluster(t, 3, testkit.WithSyncAlways(true))
	for i := range cl.N() {
		if c := cl.Server(i).NATS().JetStreamConfig(); c == nil || !c.SyncAlways {
			t.Fatalf("server %d: JetStream config %+v, want SyncAlways", i, c)
		}
	}
}
