// Package placement says where the shards of an embedded cluster go
// (Servers, the balancing rule), places a shard's streams when they are
// created (For) and moves them towards the rule while the node runs
// (Balance), with nats-server's typed JetStream API requests.
package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/natsembed"
)

// placementWait bounds For's wait for the servers the routes
// name.
const placementWait = 10 * time.Second

// Bytes is each shard's share of a byte bound of all shards together (0:
// unlimited), rounded up.
func Bytes(total int64, shards int) int64 {
	if total <= 0 || shards <= 1 {
		return total
	}
	return (total + int64(shards) - 1) / int64(shards)
}

// Servers is the balancing rule, the one place that says where the
// shards go: of the cluster's servers (sorted by name), shard k's
// replicas are on the replicas servers from server k mod N on (fewer if
// the cluster has fewer), the first of them leading it. S shards at R
// replicas on N servers put S·R/N replicas and S/N leaders on each server
// (rounded): 6 shards R3 are 3 replicas per server on 6 servers, 6 on 3.
// Shard k's hooks stream and claims bucket go to the same servers.
func Servers(servers []string, k, replicas int) []string {
	out := make([]string, min(max(replicas, 1), len(servers)))
	for j := range out {
		out[j] = servers[(k+j)%len(servers)]
	}
	return out
}

// For places the streams of shard k (its hooks stream and its claims
// bucket) when they are created, on an embedded cluster (srv) at R1 with
// more than one shard: on Servers' server, by its tag
// (natsembed.PlacementTag). nats-server itself placed all of them on one
// server (it picks the server with the most free storage, whose count of
// streams it learns only later: 3 of 3 shards on one of 3 servers in
// TestShardsCluster). Nil (the server chooses) elsewhere: tags are
// AND-ed, so no placement names R > 1 servers; Balance moves those
// replicas. An existing stream keeps where it is.
func For(cfg *config.Config, srv *natsembed.Server, log *slog.Logger) func(k int) *jetstream.Placement {
	if srv == nil || !cfg.Clustered() || cfg.Shards <= 1 || cfg.Replicas > 1 {
		return nil
	}
	peers := clusterPeers(cfg, srv)
	if len(peers) < 2 {
		return nil
	}
	log.Debug("shards: placing new shard streams over the servers", "servers", peers)
	return func(k int) *jetstream.Placement {
		return &jetstream.Placement{Tags: []string{natsembed.PlacementTag(Servers(peers, k, 1)[0])}}
	}
}

// clusterPeers are the online servers of an embedded cluster, sorted by
// name: a new stream is placed on one that can take it now (a server
// known but down gets its shards from Balance once it is back).
// The cluster's servers start together: it waits a little
// (placementWait) for those the routes name (a node may list itself) to
// be known.
func clusterPeers(cfg *config.Config, srv *natsembed.Server) []string {
	var peers []string
	for deadline := time.Now().Add(placementWait); ; time.Sleep(50 * time.Millisecond) {
		if peers = srv.ClusterPeers(false); len(peers) >= len(cfg.Routes) || time.Now().After(deadline) {
			return peers
		}
	}
}

// balanceEvery is how often Balance compares the shards with the
// rule.
const balanceEvery = 2 * time.Second

// Balance is the mover, run by every node of an embedded cluster (srv,
// with nc and js connected to it) with more than one shard until ctx ends: every balanceEvery, on the
// node whose server is the JetStream meta leader (one mover at a time; a
// second one during a leader change only gets "in progress" answers), it
// makes one step per shard stream (streams[i] is shard i mod shards's)
// towards Servers over the servers the cluster knows, offline ones
// included (a server down for a while keeps its shards; one that joins
// takes its share). See balanceStream. It is idempotent: a balanced
// cluster costs one stream info per stream and pass.
func Balance(ctx context.Context, cfg *config.Config, srv *natsembed.Server, nc *nats.Conn, js jetstream.JetStream, streams []string, log *slog.Logger) {
	if srv == nil || !cfg.Clustered() || cfg.Shards <= 1 {
		return
	}
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	for last := srv.ClusterPeers(true); ; {
		// Servers joining one after the other: moved once they all are
		// in (the same servers two passes running), not once per server;
		// the first pass at once (a node starting takes its leaders back).
		if peers := srv.ClusterPeers(true); slices.Equal(peers, last) && srv.NATS().JetStreamIsLeader() {
			for i, name := range streams {
				if err := balanceStream(ctx, nc, js, name, Servers(peers, i%cfg.Shards, cfg.Replicas), log); err != nil && ctx.Err() == nil {
					log.Warn("shards: could not move a shard; it stays where it is for now", "stream", name, "error", err)
				}
			}
		} else {
			last = peers
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// balanceStream makes one step moving stream name onto the servers want
// (want[0] leading):
//   - at R1, a stream update placing it on want[0] by its tag;
//   - at R > 1, the move of one replica from a server not in want to one
//     in want ($JS.API.ACCOUNT.STREAM.MOVE.<account>.<stream> with the
//     server to leave and the tag of the one to take: nats-server adds the
//     new peer, lets it catch up, then drops the old one; the tags are for
//     that move only, the stream's configuration keeps no placement);
//   - once on want, a leader step-down naming want[0] if it is current.
//
// Nothing while a move is in flight (the server refuses a second one).
func balanceStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, name string, want []string, log *slog.Logger) error {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := js.Stream(ictx, name)
	if err != nil {
		return err
	}
	info := st.CachedInfo()
	cl := info.Cluster
	if cl == nil || cl.Leader == "" || cl.Desired != nil || len(cl.Replicas)+1 > len(want) {
		return nil // no leader now, or a move in flight
	}
	members := []string{cl.Leader}
	current := map[string]bool{cl.Leader: true}
	for _, r := range cl.Replicas {
		members, current[r.Name] = append(members, r.Name), r.Current && !r.Offline
	}
	var from, to string
	for _, s := range members { // a follower rather than the leader
		if !slices.Contains(want, s) {
			from = s
		}
	}
	for _, s := range want {
		if !slices.Contains(members, s) {
			to = s
		}
	}
	var subject string
	var body any
	switch {
	case from != "" && to != "" && len(want) == 1:
		sc := info.Config
		sc.Placement = &jetstream.Placement{Tags: []string{natsembed.PlacementTag(to)}}
		if _, err := js.UpdateStream(ictx, sc); err != nil {
			return err
		}
		log.Info("shards: moving a shard to its server", "stream", name, "from", from, "to", to)
		return nil
	case from != "" && to != "":
		subject = fmt.Sprintf(server.JSApiServerStreamMoveT, server.DEFAULT_GLOBAL_ACCOUNT, name)
		body = server.JSApiMetaServerStreamMoveRequest{Server: from, Tags: []string{natsembed.PlacementTag(to)}}
	case to == "" && cl.Leader != want[0] && current[want[0]]:
		subject = fmt.Sprintf(server.JSApiStreamLeaderStepDownT, name)
		body = server.JSApiLeaderStepdownRequest{Placement: &server.Placement{Preferred: want[0]}}
		from, to = cl.Leader, want[0]
	default:
		return nil // where the rule wants it
	}
	data, _ := json.Marshal(body)
	msg, err := nc.RequestWithContext(ictx, subject, data)
	if err != nil {
		return err
	}
	var resp server.ApiResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return err
	}
	if resp.Error != nil {
		return errors.New(resp.Error.Description)
	}
	log.Info("shards: moving a shard towards its servers", "stream", name, "request", subject, "from", from, "to", to)
	return nil
}
