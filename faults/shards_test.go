package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// TestKillShardLeader kill -9s, under load, the node of an embedded
// 3-node cluster of 3 shards (R3) whose server leads shard 1's hooks
// stream, restarts it on its data directory, and checks that every hook
// answered 2xx is in its tenant's shard's stream, once, with one winner
// per key, and that the fleet serves every partition again.
func TestKillShardLeader(t *testing.T) {
	t.Parallel()
	const shards = 3
	h := Start(t, Options{Embedded: true, Partitions: 6, Shards: shards})
	l := NewLedger()
	run := h.startHooks(l, hookLoad{Tenants: shardTenants(shards, 2), Workers: 12, Redeliver: true})
	defer run.stop()
	killStep(t, run, "before the kill")
	victim := h.leaderNode(t, protocol.HooksStream(1))
	h.Node(victim).Kill()
	killed := time.Now()
	killStep(t, run, "after the kill")
	h.WaitServed(t, 30*time.Second, h.AllPartitions()...)
	t.Logf("node %d (leading %s) killed: every partition served again %v after the kill", victim, protocol.HooksStream(1), time.Since(killed).Round(time.Millisecond))
	h.Node(victim).Restart(t)
	killStep(t, run, "after the restart")
	run.stop()
	t.Logf("load: %s", run)
	h.CheckHooks(t, l, false)
}

// leaderNode is the index of the node whose embedded server leads stream
// name (a clustered server is named <host>-<cluster port>).
func (h *Harness) leaderNode(t *testing.T, name string) int {
	t.Helper()
	e, ok := h.srv.(*embeddedServers)
	if !ok {
		t.Fatal("leaderNode: the nodes do not embed their servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info := h.waitStreamCurrent(t, ctx, name)
	if info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("%s has no leader", name)
	}
	for i, args := range e.args {
		for j := 0; j+1 < len(args); j++ {
			if args[j] == "--cluster-listen" {
				_, port, _ := strings.Cut(args[j+1], ":")
				if strings.HasSuffix(info.Cluster.Leader, "-"+port) {
					return i
				}
			}
		}
	}
	t.Fatalf("no node's server is %s's leader %q", name, info.Cluster.Leader)
	return -1
}
