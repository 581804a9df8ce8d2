package lease

import (
	"hash/fnv"
	"slices"
)

// Assign maps every partition 0..p-1 to one of members (sorted, distinct,
// non-empty) by rendezvous hashing with bounded load: each partition goes to
// the highest-scoring member that holds fewer than ceil(p/len(members))
// partitions so far, partitions taken in order. Every member computing it
// from the same members and hosts gets the same answer; no member gets
// more than ceil(p/n); a member joining or leaving moves few partitions
// besides its own share.
//
// hosts[i] is the server members[i] is connected to ("" when unknown; nil
// for none). With shards > 1 and members on more than one server, a
// partition's own server comes first: partition n's shard is n mod shards
// (protocol.Shard of its tenants), and of the members' servers (sorted,
// distinct) shard k's is server k mod their count — the rule that places
// an embedded cluster's shard leaders (placement.Servers) — so the owner of
// a partition writes its claims to a leader on its own server where the
// load bound allows (docs/DESIGN.md "Shards").
func Assign(members, hosts []string, p, shards int) []string {
	out := make([]string, p)
	if len(members) == 0 {
		return out
	}
	servers := homes(hosts, shards)
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
	home := make([]bool, len(members))
	for n := range p {
		for i := range members {
			order[i] = i
			scores[i] = mix(seeds[i] ^ mix(uint64(n)+0x9E3779B97F4A7C15))
			home[i] = servers != nil && hosts[i] == servers[(n%shards)%len(servers)]
		}
		slices.SortFunc(order, func(a, b int) int {
			switch {
			case home[a] != home[b]:
				if home[a] {
					return -1
				}
				return 1
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

// homes are the servers (sorted, distinct, known) of hosts that shards'
// partitions are assigned to first, nil when that prefers nobody: one
// shard, or fewer than two servers.
func homes(hosts []string, shards int) []string {
	if shards <= 1 {
		return nil
	}
	var servers []string
	for _, h := range hosts {
		if h != "" {
			servers = append(servers, h)
		}
	}
	slices.Sort(servers)
	if servers = slices.Compact(servers); len(servers) < 2 {
		return nil
	}
	return servers
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
