package lease

import (
	"fmt"
	"slices"
	"testing"
)

func TestAssignBalancedAndStable(t *testing.T) {
	for n := 1; n <= 9; n++ {
		members := make([]string, n)
		for i := range members {
			members[i] = fmt.Sprintf("m%02d", i)
		}
		a := Assign(members, nil, 64, 1)
		b := Assign(members, nil, 64, 1)
		load := map[string]int{}
		for p := range a {
			if a[p] != b[p] {
				t.Fatalf("n=%d: not deterministic at %d", n, p)
			}
			load[a[p]]++
		}
		limit := (64 + n - 1) / n
		for m, l := range load {
			if l > limit {
				t.Errorf("n=%d: %s holds %d > %d", n, m, l, limit)
			}
		}
		if n > 1 {
			// Removing the last member moves its partitions and few others.
			c := Assign(members[:n-1], nil, 64, 1)
			moved := 0
			for p := range a {
				if a[p] != members[n-1] && a[p] != c[p] {
					moved++
				}
			}
			t.Logf("n=%d -> %d: %d partitions of surviving members moved", n, n-1, moved)
			if moved > 64/2 {
				t.Errorf("n=%d: %d partitions of surviving members moved", n, moved)
			}
		}
	}
}

// TestAssignPrefersTheShardsServer: with shards on several servers, each
// partition goes to a member on its shard's server (server n mod shards
// mod servers, of the members' servers sorted) while the load bound
// allows; with one shard or one server the assignment ignores the hosts.
func TestAssignPrefersTheShardsServer(t *testing.T) {
	members := []string{"a", "b", "c", "d", "e", "f"}
	hosts := []string{"s2", "s0", "s1", "s1", "s0", "s2"} // two members per server
	for _, tc := range []struct{ p, shards, servers, home int }{
		{12, 3, 3, 12}, {12, 6, 3, 12}, {36, 6, 3, 36},
		// 4 shards on 3 servers give server 0 six of the 12 partitions,
		// more than its two members may hold (2 each): 2 go elsewhere.
		{12, 4, 3, 10},
	} {
		got := Assign(members, hosts, tc.p, tc.shards)
		load := map[string]int{}
		home := 0
		for n, m := range got {
			load[m]++
			want := fmt.Sprintf("s%d", (n%tc.shards)%tc.servers)
			if hosts[slices.Index(members, m)] == want {
				home++
			}
		}
		limit := (tc.p + len(members) - 1) / len(members)
		for m, l := range load {
			if l > limit {
				t.Errorf("p=%d shards=%d: %s holds %d > %d", tc.p, tc.shards, m, l, limit)
			}
		}
		if home != tc.home {
			t.Errorf("p=%d shards=%d: %d of %d partitions on their shard's server, want %d", tc.p, tc.shards, home, tc.p, tc.home)
		}
	}
	plain := Assign(members, nil, 12, 1)
	for _, same := range [][]string{
		Assign(members, hosts, 12, 1),                                        // one shard
		Assign(members, []string{"s0", "s0", "s0", "s0", "s0", "s0"}, 12, 3), // one server
		Assign(members, []string{"", "", "", "", "", ""}, 12, 3),             // servers unknown
	} {
		if !slices.Equal(same, plain) {
			t.Errorf("hosts changed an assignment they cannot improve: %v, want %v", same, plain)
		}
	}
}
