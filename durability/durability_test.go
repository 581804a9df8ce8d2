package durability_test

import (
	"testing"

	"github.com/sluice-dev/sluice/durability"
)

// TestHubThen: a hub's sync answer waits on the barrier its own 2xx
// waits on — on an R1 cluster the cluster's, not the server's own group
// sync, which covers only the streams on that server — a single node's
// group sync also at acked, and nothing where the acks already say it.
func TestHubThen(t *testing.T) {
	newGroup := func() *durability.GroupSync {
		g := durability.NewGroupSync(func() error { return nil })
		t.Cleanup(g.Close)
		return g
	}
	own, barrier := newGroup(), newGroup()
	cases := []struct {
		name  string
		mode  durability.Mode
		sync  durability.Syncer
		group *durability.GroupSync
		want  *durability.GroupSync // nil: answered at once
	}{
		{"single node, synced", durability.NodeRounds, own, own, own},
		{"single node, acked", durability.Acked, nil, own, own},
		{"single node, sync-always", durability.ServerFsync, nil, own, nil},
		{"R1 cluster, synced", durability.ClusterRounds, barrier, own, barrier},
		{"R1 cluster, acked", durability.ClusterAcked, nil, nil, nil},
		{"R3 cluster, synced", durability.ClusterFsync, nil, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			then := durability.HubThen(c.mode, c.sync, c.group)
			if c.want == nil {
				if then != nil {
					t.Fatal("a barrier where the hub answers at once")
				}
				return
			}
			if then == nil {
				t.Fatal("answered at once")
			}
			before := map[*durability.GroupSync]uint64{own: own.Stats().Waits, barrier: barrier.Stats().Waits}
			done := make(chan error, 1)
			then.Then(func(err error) { done <- err })
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
	cfg := durability.Config{Prefix: "sluice", HooksStream: "HOOKS", OutboxStream: "HOOKS_OUTBOX", Shards: 3}
	synced := map[string]bool{}
	for _, s := range cfg.Streams() {
		synced[s] = true
	}
	for _, c := range []struct {
		scope durability.SyncScope
		want  []string
	}{
		{durability.SyncScope{Tenant: "t1"}, []string{"HOOKS_1", "KV_sluice_claims_1"}}, // shard 1 of 3
		{durability.SyncScope{Replay: true}, []string{"KV_sluice_replay"}},
		{durability.SyncScope{DeadLetters: true}, []string{"DEADLETTER"}},
		{durability.SyncScope{}, nil},
	} {
		got := cfg.ScopeStreams(c.scope)
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
