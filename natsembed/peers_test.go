package natsembed_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/testkit"
)

// TestClusterPeersOffline: a server that goes down stays among the peers
// with withOffline (the shards' mover keeps its shards for it) and leaves
// them without (a new stream is placed only on a server up now).
func TestClusterPeersOffline(t *testing.T) {
	c := testkit.Cluster(t, 3)
	all := c.Server(0).ClusterPeers(true)
	if len(all) != 3 || !slices.Equal(c.Server(0).ClusterPeers(false), all) {
		t.Fatalf("peers of a whole cluster: %v (online %v), want 3", all, c.Server(0).ClusterPeers(false))
	}
	down := c.Server(2).NATS().Name()
	c.Kill(2)
	testkit.Eventually(t, 20*time.Second, func() bool {
		online := c.Server(0).ClusterPeers(false)
		return len(online) == 2 && !slices.Contains(online, down)
	}, "the killed server "+down+" left the online peers")
	if got := c.Server(0).ClusterPeers(true); !slices.Equal(got, all) {
		t.Fatalf("peers with the offline ones: %v, want %v", got, all)
	}
}
