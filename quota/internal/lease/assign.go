package lease

import (
	"hash/fnv"
	"slices"
)

// Assign maps every partition 0..p-1 to one of members (sorted, distinct,
// non-empty) by rendezvous hashing with bounded load: each partition goes to
// the highest-scoring member that holds fewer than ceil(p/len(members))
// partitions so far, partitions taken in order. Every member computing it
// from the same member set gets the same answer; no member gets more than
// ceil(p/n); a member joining or leaving moves few partitions besides its
// own share.
func Assign(members []string, p int) []string {
	out := make([]string, p)
	if len(members) == 0 {
		return out
	}
	capacity := (p + len(members) - 1) / len(members)
	load := make([]int, len(members))
	seeds := make([]uint64, len(members))
	for i, m := range members {
		h := fnv.New64a()
		_, _ = h.Write([]byte(m))
		seeds[i] = h.Sum64()
	}
	order := make([]int, len(members))
	scores := make([]uint64, len(members))
	for n := range p {
		for i := range members {
			order[i] = i
			scores[i] = mix(seeds[i] ^ mix(uint64(n)+0x9E3779B97F4A7C15))
		}
		slices.SortFunc(order, func(a, b int) int {
			switch {
			case scores[a] > scores[b]:
				return -1
			case scores[a] < scores[b]:
				return 1
			}
			return 0
		})
		for _, i := range order {
			if load[i] < capacity {
				load[i]++
				out[n] = members[i]
				break
			}
		}
	}
	return out
}

// mix is the splitmix64 finalizer: a bijection that spreads every input bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	x ^= x >> 31
	return x
}
