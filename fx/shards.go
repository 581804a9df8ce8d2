package sluicefx

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/natsembed"
)

// placementWait bounds shardPlacement's wait for the servers the routes
// name.
const placementWait = 10 * time.Second

// shardBytes is each shard's share of a byte bound of all shards
// together (0: unlimited), rounded up.
func shardBytes(total int64, shards int) int64 {
	if total <= 0 || shards <= 1 {
		return total
	}
	return (total + int64(shards) - 1) / int64(shards)
}

// shardPlacement places the streams of shard k (its hooks stream and its
// claims bucket) when they are created, on an embedded cluster at R1 with
// more than one shard: on server k mod N of the N servers the cluster
// knows online, sorted by name (natsembed.PlacementTag), so that the
// shards' leaders spread over the servers. nats-server itself placed all
// of them on one server (it picks the server with the most free storage,
// whose count of streams it learns only later: 3 of 3 shards on one of 3
// servers in TestShardsCluster). Nil (the server chooses) elsewhere:
// replicated shards are on every server of a cluster of R nodes anyway.
// An existing stream keeps where it is.
func shardPlacement(cfg *config.Config, n *NATS, log *slog.Logger) func(k int) *jetstream.Placement {
	if n.Server == nil || !cfg.Clustered() || cfg.Shards <= 1 || cfg.Replicas > 1 {
		return nil
	}
	// The cluster's servers start together: wait a little for those the
	// routes name (a node may list itself) to be known.
	var peers []string
	for deadline := time.Now().Add(placementWait); ; time.Sleep(50 * time.Millisecond) {
		if peers = n.Server.ClusterPeers(); len(peers) >= len(cfg.Routes) || time.Now().After(deadline) {
			break
		}
	}
	if len(peers) < 2 {
		return nil
	}
	log.Debug("shards: placing new shard streams over the servers", "servers", peers)
	return func(k int) *jetstream.Placement {
		return &jetstream.Placement{Tags: []string{natsembed.PlacementTag(peers[k%len(peers)])}}
	}
}
