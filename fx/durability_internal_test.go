package fx

import (
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/durability"
)

// TestDurabilityMode: each combination of the four inputs, as flags, gets
// its row of the durability package doc's table (durabilityConfig fills
// durability.Config from them).
func TestDurabilityMode(t *testing.T) {
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
		got := durabilityConfig(cfg).Mode()
		if got != c.want {
			t.Errorf("%v: mode %v, want %v", c.args, got, c.want)
		}
	}
}

// TestDurabilityStreams: the streams a round syncs are every shard's
// hooks stream and claims bucket, the outbox, the dead letters and the
// buckets answers rest on, by the names the flags give them.
func TestDurabilityStreams(t *testing.T) {
	cfg, err := config.Parse([]string{"--data-dir", t.TempDir(), "--partitions", "6/3"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := durabilityConfig(cfg).Streams()
	slices.Sort(got)
	want := []string{"DEADLETTER", "HOOKS", "HOOKS_1", "HOOKS_2", "HOOKS_OUTBOX", "KV_sluice_claims", "KV_sluice_claims_1",
		"KV_sluice_claims_2", "KV_sluice_counts", "KV_sluice_limits", "KV_sluice_replay", "KV_sluice_tenants"}
	if !slices.Equal(got, want) {
		t.Fatalf("streams %v, want %v", got, want)
	}
}
