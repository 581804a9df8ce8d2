package lease

import (
	"fmt"
	"testing"
)

func TestAssignBalancedAndStable(t *testing.T) {
	for n := 1; n <= 9; n++ {
		members := make([]string, n)
		for i := range members {
			members[i] = fmt.Sprintf("m%02d", i)
		}
		a := Assign(members, 64)
		b := Assign(members, 64)
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
			c := Assign(members[:n-1], 64)
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
