package quota

import (
	"strconv"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// DefaultPartitions is the default number of quota partitions of a fleet.
const DefaultPartitions = 64

// MaxPartitions bounds the partition count (one lease, one subscription and
// one KV key per partition).
const MaxPartitions = frame.MaxPartitions

// Partition maps a tenant (or a counter's principal) to its partition:
// FNV-1a 32 of the string's bytes mod p, the same function as nats-server's
// {{partition(p, …)}} subject mapping applied to a token that holds the
// string unencoded (true of every name of [A-Za-z0-9_-]). A p below 1 is
// treated as 1 (like nats-server, it maps everything to partition 0).
func Partition(key string, p int) int {
	if p <= 1 {
		return 0
	}
	h := uint32(fnvOffset32)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= fnvPrime32
	}
	return int(h % uint32(p))
}

// partitionBytes is Partition of a byte slice.
func partitionBytes(key []byte, p int) int {
	if p <= 1 {
		return 0
	}
	h := uint32(fnvOffset32)
	for _, c := range key {
		h ^= uint32(c)
		h *= fnvPrime32
	}
	return int(h % uint32(p))
}

// FNV-1a 32 (hash/fnv), inlined: no allocation per call.
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// partitionSubject is the subject the owner of partition n serves:
// "<prefix>.v1.quota.p.<n>".
func partitionSubject(prefix string, n int) string {
	return prefix + ".v1.quota.p." + strconv.Itoa(n)
}

// memberSubject is the subject a worker serves batch frames on, for every
// partition it holds: "<prefix>.v1.quota.m.<encoded member id>". Owners
// advertise it in their replies; clients learn it and send one frame per
// owner rather than one per partition.
func memberSubject(prefix, id string) string {
	return prefix + ".v1.quota.m." + kvstore.EncodeToken(id)
}

// counterKey is the counts-bucket key of a (principal, key) counter.
func counterKey(principal, key string) string { return kvstore.Join(principal, key) }
