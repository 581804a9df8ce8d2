package sluicefx

import (
	"context"
	"encoding/json"
	"errors"
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
	peers := clusterPeers(cfg, n)
	if len(peers) < 2 {
		return nil
	}
	log.Debug("shards: placing new shard streams over the servers", "servers", peers)
	return func(k int) *jetstream.Placement {
		return &jetstream.Placement{Tags: []string{natsembed.PlacementTag(peers[k%len(peers)])}}
	}
}

// clusterPeers are the servers of an embedded cluster, sorted by name.
// The cluster's servers start together: it waits a little
// (placementWait) for those the routes name (a node may list itself) to
// be known.
func clusterPeers(cfg *config.Config, n *NATS) []string {
	var peers []string
	for deadline := time.Now().Add(placementWait); ; time.Sleep(50 * time.Millisecond) {
		if peers = n.Server.ClusterPeers(); len(peers) >= len(cfg.Routes) || time.Now().After(deadline) {
			return peers
		}
	}
}

// spreadLeaders moves the leader of shard k's stream (streams[k]) to
// server k mod N of the cluster's N servers, on an embedded cluster with
// replicated shards: there every server holds a replica of every shard,
// and the elections had put the leaders of all three shards' hooks
// streams on one server of three (the scale bench, R3). A leader
// step-down naming the preferred server (nats-server 2.12+) moves it;
// one that fails is logged and left (the shard keeps its leader). Each
// node runs it at its start, so a restarted node takes its shards'
// leadership back (a step-down costs the stream a moment without a
// leader, which writes retry).
func spreadLeaders(ctx context.Context, cfg *config.Config, n *NATS, streams []string, log *slog.Logger) {
	if n.Server == nil || !cfg.Clustered() || len(streams) <= 1 || cfg.Replicas <= 1 {
		return
	}
	peers := clusterPeers(cfg, n)
	if len(peers) < 2 {
		return
	}
	for k, name := range streams {
		want := peers[k%len(peers)]
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second) // a request lost to a leader change is not waited out
		st, err := n.JS.Stream(ictx, name)
		cancel()
		if err != nil || st.CachedInfo().Cluster == nil || st.CachedInfo().Cluster.Leader == want {
			continue
		}
		body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": want}})
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msg, err := n.Conn.RequestWithContext(rctx, "$JS.API.STREAM.LEADER.STEPDOWN."+name, body)
		cancel()
		var resp struct {
			Success bool `json:"success"`
			Error   *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err == nil {
			err = json.Unmarshal(msg.Data, &resp)
		}
		switch {
		case err != nil:
		case resp.Error != nil:
			err = errors.New(resp.Error.Description)
		case !resp.Success:
			err = errors.New("not done")
		}
		if err != nil {
			log.Warn("shards: could not move a shard's leader; it keeps its leader", "stream", name, "to", want, "error", err)
			continue
		}
		log.Debug("shards: moved a shard's leader", "stream", name, "from", st.CachedInfo().Cluster.Leader, "to", want)
	}
}
