package sluicefx

import (
	"testing"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/kvstore"
)

// TestHubSyncThen: a hub's sync answer waits on the barrier its own 2xx
// waits on — on an R1 cluster the cluster's, not the server's own group
// commit, which covers only the streams on that server — a single node's
// group commit also at acked, and nothing where the acks already say it.
func TestHubSyncThen(t *testing.T) {
	newGroup := func() *kvstore.GroupSync {
		g := kvstore.NewGroupSync(func() error { return nil })
		t.Cleanup(g.Close)
		return g
	}
	cluster := []string{"--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://127.0.0.1:6223", "--leaf-listen", "127.0.0.1:7422"}
	own, barrier := newGroup(), newGroup()
	cases := []struct {
		name string
		args []string
		n    *NATS
		want *kvstore.GroupSync // nil: answered at once
	}{
		{"single node, synced", nil, &NATS{Sync: own, Group: own}, own},
		{"single node, acked", []string{"--durability", "acked"}, &NATS{Group: own}, own},
		{"single node, sync-always", []string{"--durability", "sync-always"}, &NATS{Group: own}, nil},
		{"R1 cluster, synced", cluster, &NATS{Sync: barrier, Group: own}, barrier},
		{"R1 cluster, acked", append(cluster, "--durability", "acked"), &NATS{}, nil},
		{"R3 cluster, synced", append(cluster, "--replicas", "3"), &NATS{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse(append([]string{"--data-dir", t.TempDir()}, c.args...), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			then := hubSyncThen(cfg, c.n)
			if c.want == nil {
				if then != nil {
					t.Fatal("a barrier where the hub answers at once")
				}
				return
			}
			if then == nil {
				t.Fatal("answered at once")
			}
			before := map[*kvstore.GroupSync]uint64{own: own.Stats().Waits, barrier: barrier.Stats().Waits}
			done := make(chan error, 1)
			then(func(err error) { done <- err })
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for g, w := range before {
				if joined := g.Stats().Waits > w; joined != (g == c.want) {
					t.Fatalf("joined the wrong barrier (own %v, the cluster's %v)", g == own && joined, g == barrier && joined)
				}
			}
		})
	}
}
