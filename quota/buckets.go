package quota

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/lease"
)

// LeasesBucket is the configuration of the bucket holding the fleet's
// partition count, member heartbeats and partition leases for prefix.
func LeasesBucket(prefix string, replicas int) kvstore.BucketConfig {
	return kvstore.BucketConfig{
		Name:        kvstore.BucketNames(prefix).Leases,
		Description: "sluice quota: partition count, member heartbeats, partition leases",
		Replicas:    replicas,
	}
}

// CountsBucket is the configuration of the bucket holding reserve/release
// counters for prefix.
func CountsBucket(prefix string, replicas int) kvstore.BucketConfig {
	return kvstore.BucketConfig{
		Name:        kvstore.BucketNames(prefix).Counts,
		Description: "sluice quota: reserve/release counters",
		Replicas:    replicas,
	}
}

// OpenBuckets opens (creating or updating) the leases and counts buckets of
// prefix with the given replica count.
func OpenBuckets(ctx context.Context, js jetstream.JetStream, prefix string, replicas int) (leases, counts *kvstore.Bucket, err error) {
	if err := protocol.ValidatePrefix(prefix); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errInvalidOption, err)
	}
	if leases, err = kvstore.OpenBucket(ctx, js, LeasesBucket(prefix, replicas)); err != nil {
		return nil, nil, err
	}
	if counts, err = kvstore.OpenBucket(ctx, js, CountsBucket(prefix, replicas)); err != nil {
		return nil, nil, err
	}
	return leases, counts, nil
}

// FleetPartitions reads the partition count the fleet recorded in its
// leases bucket (its first member writes it; kvstore.ErrNotFound before
// that). A leaf compares it with its own before routing to its hub.
func FleetPartitions(ctx context.Context, leases *kvstore.Bucket) (int, error) {
	p, _, err := lease.Partitions(ctx, leases)
	return p, err
}

// FleetShape reads the partition and shard counts the fleet recorded in
// its leases bucket (shards 1 for a fleet without shards;
// kvstore.ErrNotFound before its first member). A leaf routes its hooks
// and claims to its hub's shards by it.
func FleetShape(ctx context.Context, leases *kvstore.Bucket) (partitions, shards int, err error) {
	return lease.Partitions(ctx, leases)
}
