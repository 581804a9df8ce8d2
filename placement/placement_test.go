package placement

import (
	"fmt"
	"slices"
	"testing"
)

// TestShardServers: the rule spreads S shards' R replicas and leaders
// evenly (S·R/N and S/N per server when N divides them), a shard's
// replicas on distinct servers, fewer when the cluster has fewer than R.
func TestServers(t *testing.T) {
	for _, c := range []struct{ servers, shards, replicas, held, led int }{
		{3, 6, 3, 6, 2}, {6, 6, 3, 3, 1}, {6, 6, 1, 1, 1}, {3, 3, 1, 1, 1}, {2, 4, 3, 4, 2}, {1, 4, 1, 4, 4},
	} {
		var servers []string
		for i := range c.servers {
			servers = append(servers, fmt.Sprint("s", i))
		}
		held, led := map[string]int{}, map[string]int{}
		for k := range c.shards {
			got := Servers(servers, k, c.replicas)
			if len(got) != min(c.replicas, c.servers) || len(slices.Compact(slices.Sorted(slices.Values(got)))) != len(got) {
				t.Fatalf("%+v: shard %d on %v", c, k, got)
			}
			led[got[0]]++
			for _, s := range got {
				held[s]++
			}
		}
		for _, s := range servers {
			if held[s] != c.held || led[s] != c.led {
				t.Errorf("%+v: %s holds %d shards and leads %d, want %d and %d", c, s, held[s], led[s], c.held, c.led)
			}
		}
	}
}
