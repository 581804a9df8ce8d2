package protocol

import (
	"strconv"
	"strings"
)

// Shards (docs/PROTOCOL.md "Shards"): a fleet of S shards keeps its hooks
// in S streams and its claims in S buckets, so that a cluster's writes
// spread over its servers' Raft leaders. A tenant's shard is its quota
// partition mod S, so partition p's owner writes to shard p mod S only.
// Shard 0 keeps the names of a fleet without shards.

// MaxShards bounds a fleet's shard count.
const MaxShards = 16

// HooksStreamName is the stream of accepted hooks of shard 0 (of every
// hook of a fleet without shards).
const HooksStreamName = "HOOKS"

// Partition maps a key (a tenant, a counter's principal) to one of p
// partitions: FNV-1a 32 of its bytes mod p (p below 1 counts as 1). It is
// quota's partition function and, applied with the shard count, the shard
// function (Shard).
func Partition[S ~string | ~[]byte](key S, p int) int {
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

// FNV-1a 32 (hash/fnv), inlined: no allocation per call.
const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// Shard is the shard of tenant in a fleet of shards shards: FNV-1a
// 32(tenant) mod shards, which equals Partition(tenant, P) mod shards for
// every partition count P the shard count divides.
func Shard(tenant string, shards int) int { return Partition(tenant, shards) }

// ShardName is the name of shard k's copy of a stream or bucket called
// name: name itself for shard 0, name + "_<k>" for k >= 1.
func ShardName(name string, shard int) string {
	if shard <= 0 {
		return name
	}
	return name + "_" + strconv.Itoa(shard)
}

// HooksStream is the stream of shard k's hooks: HOOKS for shard 0,
// HOOKS_<k> for k >= 1.
func HooksStream(shard int) string { return ShardName(HooksStreamName, shard) }

// TenantHooksStream is the stream holding tenant's hooks in a fleet of
// shards shards.
func TenantHooksStream(tenant string, shards int) string {
	return HooksStream(Shard(tenant, shards))
}

// BucketStem is the stem of prefix's KV bucket names: the prefix with '.'
// replaced by '_' ("sluice" -> "sluice_claims", …).
func BucketStem(prefix string) string { return strings.ReplaceAll(prefix, ".", "_") }

// ClaimsBucket is the dedupe claims bucket of shard k for prefix:
// "<stem>_claims" for shard 0, "<stem>_claims_<k>" for k >= 1 (its stream
// is KV_ + that name).
func ClaimsBucket(prefix string, shard int) string {
	return ShardName(BucketStem(prefix)+"_claims", shard)
}

// HooksSubjects is the subject filter of the hooks as stored,
// "<prefix>.hooks.>", in whichever shard's stream: a consumer's filters
// are the same for every shard.
func HooksSubjects(prefix string) string { return prefix + ".hooks.>" }

// HookSubject is the subject a tenant/source's hooks are stored under,
// "<prefix>.hooks.<tenant>.<source>" (a source without event_type;
// PROTOCOL.md "Stored hook").
func HookSubject(prefix, tenant, source string) string {
	return prefix + ".hooks." + Join(tenant, source)
}

// TypedHookSubject is the subject of a hook of a source with event_type,
// "<prefix>.hooks.<tenant>.<source>.<type>", the type encoded like every
// token; a request without a type gets NoTypeToken.
func TypedHookSubject(prefix, tenant, source, typ string) string {
	return HookSubject(prefix, tenant, source) + "." + EncodeToken(typ)
}

// NoTypeToken is the type token of a typed source's hook whose request
// carries no type: the encoding of the empty string, which no type can
// produce.
const NoTypeToken = "=" // EncodeToken("")

// ShardHooksSubjects is what shard k's stream captures in a fleet of more
// than one shard, "<prefix>.shard.<k>.hooks.>": a hook is published there
// and stored under "<prefix>.hooks.<rest>" (the stream's subject
// transform). A fleet of one shard publishes to the stored subject itself.
func ShardHooksSubjects(prefix string, shard int) string {
	return prefix + ".shard." + strconv.Itoa(shard) + ".hooks.>"
}

// ShardPublishSubject is the subject a hook stored under subject
// ("<prefix>.hooks.<rest>") is published to in shard k of a fleet of
// shards shards: subject itself when shards is 1, else
// "<prefix>.shard.<k>.hooks.<rest>".
func ShardPublishSubject(prefix string, shard, shards int, subject string) string {
	if shards <= 1 {
		return subject
	}
	rest, ok := strings.CutPrefix(subject, prefix+".hooks.")
	if !ok {
		return subject
	}
	return prefix + ".shard." + strconv.Itoa(shard) + ".hooks." + rest
}
