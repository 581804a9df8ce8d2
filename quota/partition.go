package quota

import (
	"strconv"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// MaxPartitions bounds the partition count (one lease, one subscription and
// one KV key per partition).
const MaxPartitions = frame.MaxPartitions

// Partition maps a tenant (or a counter's principal) to its partition:
// FNV-1a 32 of the key's bytes mod p, the same function as nats-server's
// {{partition(p, …)}} subject mapping applied to a token that holds the
// key unencoded (true of every name of [A-Za-z0-9_-]). A p below 1 is
// treated as 1 (like nats-server, it maps everything to partition 0). The
// key is a string or, as an owner reads it from a frame, bytes.
func Partition[S ~string | ~[]byte](key S, p int) int { return protocol.Partition(key, p) }

// PartitionSubject is the subject the owner of partition n serves:
// "<prefix>.v1.quota.p.<n>".
func PartitionSubject(prefix string, n int) string {
	return partitionStem(prefix) + strconv.Itoa(n)
}

func partitionStem(prefix string) string { return prefix + ".v1.quota.p." }

// MemberSubject is the subject a worker serves batch frames on, for every
// partition it holds: "<prefix>.v1.quota.m.<encoded member id>". Owners
// advertise it in their replies; clients learn it and send one frame per
// owner rather than one per partition.
func MemberSubject(prefix, id string) string {
	return memberStem(prefix) + protocol.EncodeToken(id)
}

func memberStem(prefix string) string { return prefix + ".v1.quota.m." }

// MaxMemberIDBytes bounds a member id (owner.WithMemberID).
const MaxMemberIDBytes = 128

// isMemberSubject reports whether subject is one MemberSubject(prefix, id)
// gives for a valid id: the only subjects a client follows an owner's
// reply to.
func isMemberSubject(prefix string, subject []byte) bool {
	stem := memberStem(prefix)
	if len(subject) <= len(stem) || string(subject[:len(stem)]) != stem {
		return false
	}
	id, err := protocol.DecodeToken(string(subject[len(stem):]))
	return err == nil && ValidMemberID(id)
}

// ValidMemberID is the rule of a member id (owner.WithMemberID): 1..MaxMemberIDBytes bytes.
func ValidMemberID(id string) bool { return id != "" && len(id) <= MaxMemberIDBytes }

// CounterKey is the counts-bucket key of a (principal, key) counter.
func CounterKey(principal, key string) string { return protocol.Join(principal, key) }

// Leaves reach their hub's owners (docs/LEAF-MODE.md)
// through a subject namespace of their own, which the hub maps onto the
// owners' partition subjects: a leaf's own "<prefix>.v1.>" subjects do
// not cross its leaf connection (leaf and hub serve the same names), and
// this namespace has no subscriber on the leaf.

// HubPrefix is the prefix a leaf's Router routes to its hub's owners
// with: its partition subjects are "<prefix>.hub.v1.quota.p.<n>".
func HubPrefix(prefix string) string { return prefix + ".hub" }

// HubMapping is the subject mapping a hub serving leaves applies: a
// leaf's partition subject to the owners' ("<prefix>.hub.v1.quota.p.*"
// to "<prefix>.v1.quota.p.{{wildcard(1)}}"). Member subjects are not
// mapped: a leaf's Router (prefix HubPrefix) does not follow an owner's
// member subject, so it keeps to the partition subjects.
func HubMapping(prefix string) (from, to string) {
	return partitionStem(HubPrefix(prefix)) + "*", partitionStem(prefix) + "{{wildcard(1)}}"
}
