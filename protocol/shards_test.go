package protocol_test

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/protocol"
)

// TestShardIsPartitionModShards: a tenant's shard is its partition mod
// the shard count, for every partition count the shard count divides, so
// the owner of partition p writes to shard p mod S only.
func TestShardIsPartitionModShards(t *testing.T) {
	for i := range 2000 {
		tenant := fmt.Sprintf("tenant-%d", i)
		for _, s := range []int{1, 2, 3, 4, 8, 16} {
			for _, p := range []int{s, 2 * s, 48, 64, 4096} {
				if p%s != 0 {
					continue
				}
				if got, want := protocol.Shard(tenant, s), protocol.Partition(tenant, p)%s; got != want {
					t.Fatalf("Shard(%q, %d) = %d, Partition(%q, %d) mod %d = %d", tenant, s, got, tenant, p, s, want)
				}
			}
		}
	}
}

// TestShardNames: shard 0 keeps the names of a fleet without shards; one
// shard publishes to the stored subject itself.
func TestShardNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{protocol.HooksStream(0), "HOOKS"},
		{protocol.HooksStream(2), "HOOKS_2"},
		{protocol.ClaimsBucket("sluice", 0), "sluice_claims"},
		{protocol.ClaimsBucket("a.b", 3), "a_b_claims_3"},
		{protocol.TenantHooksStream("acme", 1), "HOOKS"},
		{protocol.ShardPublishSubject("sluice", 0, 1, "sluice.hooks.acme.gh"), "sluice.hooks.acme.gh"},
		{protocol.ShardPublishSubject("sluice", 2, 3, "sluice.hooks.acme.gh"), "sluice.shard.2.hooks.acme.gh"},
		{protocol.ShardHooksSubjects("sluice", 2), "sluice.shard.2.hooks.>"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
