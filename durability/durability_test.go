package durability_test

import (
	"testing"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/kvstore"
)

// TestFor: each combination of the four inputs gets its row of the
// package doc's table.
func TestFor(t *testing.T) {
	cluster := []string{"--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://127.0.0.1:6223"}
	cases := []struct {
		args []string
		want durability.Mode
	}{
		{[]string{"--nats-url", "nats://127.0.0.1:4222"}, durability.External},
		{[]string{"--nats-url", "nats://127.0.0.1:4222", "--durability", "sync-always"}, durability.External},
		{nil, durability.NodeRounds},
		{[]string{"--durability", "acked"}, durability.Acked},
		{[]string{"--durability", "sync-always"}, durability.ServerFsync},
		{cluster, durability.ClusterRounds},
		{append(cluster, "--durability", "acked"), durability.ClusterAcked},
		{append(cluster, "--durability", "acked", "--replicas", "3"), durability.ClusterAcked},
		{append(cluster, "--durability", "sync-always"), durability.ClusterFsync},
		{append(cluster, "--replicas", "3"), durability.ClusterFsync},
	}
	for _, c := range cases {
		cfg, err := config.Parse(append([]string{"--data-dir", t.TempDir()}, c.args...), nil, nil)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		got := durability.For(cfg)
		if got != c.want {
			t.Errorf("%v: mode %v, want %v", c.args, got, c.want)
		}
	}
}

// TestHubThen: a hub's sync answer waits on the barrier its own 2xx
// waits on — on an R1 cluster the cluster's, not the server's own group
// sync, which covers only the streams on that server — a single node's
// group sync also at acked, and nothing where the acks already say it.
func TestHubThen(t *testing.T) {
	newGroup := func() *kvstore.GroupSync {
		g := kvstore.NewGroupSync(func() error { return nil })
		t.Cleanup(g.Close)
		return g
	}
	cluster := []string{"--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://127.0.0.1:6223", "--leaf-listen", "127.0.0.1:7422"}
	own, barrier := newGroup(), newGroup()
	cases := []struct {
		name  string
		args  []string
		sync  kvstore.Syncer
		group *kvstore.GroupSync
		want  *kvstore.GroupSync // nil: answered at once
	}{
		{"single node, synced", nil, own, own, own},
		{"single node, acked", []string{"--durability", "acked"}, nil, own, own},
		{"single node, sync-always", []string{"--durability", "sync-always"}, nil, own, nil},
		{"R1 cluster, synced", cluster, barrier, own, barrier},
		{"R1 cluster, acked", append(cluster, "--durability", "acked"), nil, nil, nil},
		{"R3 cluster, synced", append(cluster, "--replicas", "3"), nil, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.Parse(append([]string{"--data-dir", t.TempDir()}, c.args...), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			then := durability.HubThen(durability.For(cfg), c.sync, c.group)
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

// TestScopeStreams: a scope names exactly the streams its writes went to
// (a tenant's shard, the replay bucket, the dead letters), and each of them
// is one a barrier round syncs.
func TestScopeStreams(t *testing.T) {
	cfg, err := config.Parse([]string{"--data-dir", t.TempDir(), "--partitions", "6/3"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	synced := map[string]bool{}
	for _, s := range durability.Streams(cfg) {
		synced[s] = true
	}
	for _, c := range []struct {
		scope kvstore.SyncScope
		want  []string
	}{
		{kvstore.SyncScope{Tenant: "t1"}, []string{"HOOKS_1", "KV_sluice_claims_1"}}, // shard 1 of 3
		{kvstore.SyncScope{Replay: true}, []string{"KV_sluice_replay"}},
		{kvstore.SyncScope{DeadLetters: true}, []string{"DEADLETTER"}},
		{kvstore.SyncScope{}, nil},
	} {
		got := durability.ScopeStreams(cfg, c.scope)
		if len(got) != len(c.want) {
			t.Fatalf("%+v: %v, want %v", c.scope, got, c.want)
		}
		for i, s := range got {
			if s != c.want[i] || !synced[s] {
				t.Fatalf("%+v: %v (synced %v), want %v, each synced by a round", c.scope, got, synced[s], c.want)
			}
		}
	}
}
