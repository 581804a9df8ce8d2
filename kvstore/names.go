package kvstore

import "github.com/sluice-dev/sluice/protocol"

// Buckets are the names of sluice's KV buckets for one prefix: the prefix
// with '.' replaced by '_', then a suffix ("sluice" -> "sluice_claims").
type Buckets struct {
	Claims   string // dedupe claims (of shard 0: protocol.ClaimsBucket)
	Replay   string // replay nonces
	Leases   string // members, partition leases, fleet config
	Counts   string // reserve/release counters
	Limits   string // admin limit overrides
	Cooldown string // shared upstream readings and penalties
	Tenants  string // tenant and source records of the admin API
}

// BucketNames derives the bucket names for prefix.
func BucketNames(prefix string) Buckets {
	stem := protocol.BucketStem(prefix)
	return Buckets{
		Claims:   protocol.ClaimsBucket(prefix, 0),
		Replay:   stem + "_replay",
		Leases:   stem + "_leases",
		Counts:   stem + "_counts",
		Limits:   stem + "_limits",
		Cooldown: stem + "_cooldown",
		Tenants:  stem + "_tenants",
	}
}
