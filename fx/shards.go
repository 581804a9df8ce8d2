package sluicefx

import (
	"context"
	"log/slog"

	"github.com/sluice-dev/sluice/kvstore"
)

// shardBytes is each shard's share of a byte bound of all shards
// together (0: unlimited), rounded up.
func shardBytes(total int64, shards int) int64 {
	if total <= 0 || shards <= 1 {
		return total
	}
	return (total + int64(shards) - 1) / int64(shards)
}

// placeLeaders spreads the leaders of the shards' streams over the
// cluster's servers (see its definition below).
func placeLeaders(ctx context.Context, n *NATS, hooks []string, claims []*kvstore.Bucket, log *slog.Logger) error {
	return nil
}
