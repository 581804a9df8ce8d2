// Package durability says what a 2xx waits for. The mode is chosen in one
// place (For) from the configuration; Start starts what the mode needs on
// a node with an embedded server, and fx hands its barrier (a
// kvstore.Syncer, nil where the ack is the promise) to the edge, the
// service and the owner. docs/RELIABILITY.md "Durability
// levels" says what each level promises.
//
//	mode            configuration                          a 2xx waits for                                   barrier
//	External        --nats-url                             the external server's ack (its sync is its own)   nil
//	Acked           single node, acked                     the ack (page cache; the record round syncs <=1 s) nil
//	ServerFsync     single node, sync-always               the ack, sent after nats-server's fsync           nil
//	NodeRounds      single node, synced (default)          a round of the node's group sync                  kvstore.GroupSync over Server.SyncStreams
//	ClusterAcked    cluster, acked                         a quorum's ack (memory); no record                nil
//	ClusterFsync    cluster, sync-always or synced with    the ack, after a quorum fsynced its Raft appends  nil
//	                --replicas > 1
//	ClusterRounds   R1 cluster, synced                     a round of the cluster barrier: every node        ClusterBarrier over Rounds
//	                                                       holding a durable stream runs a sync round
//
// A round syncs Streams (the streams answers rest on); on a cluster a
// round a node did not confirm fails only the callers whose writes went to
// that node's streams (ScopeStreams). ClusterRounds' barrier runs Rounds,
// which ask every node; each node answers with Serve over its own group
// sync. A hub answers its leaves with the same Serve over HubThen: an
// edge drops a forwarded batch from its outbox only after that answer.
package durability

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Mode is what a 2xx waits for; For chooses it.
type Mode int

// The modes, one per row of the package doc's table.
const (
	External Mode = iota
	Acked
	ServerFsync
	NodeRounds
	ClusterAcked
	ClusterFsync
	ClusterRounds
)

var modeNames = [...]string{"external", "acked", "server-fsync", "node-rounds", "cluster-acked", "cluster-fsync", "cluster-rounds"}

func (m Mode) String() string {
	if m < 0 || int(m) >= len(modeNames) {
		return fmt.Sprintf("Mode(%d)", int(m))
	}
	return modeNames[m]
}

// For is the mode of a node configured by cfg: the only place the four
// inputs (--nats-url, --durability, a cluster, --replicas) are combined.
func For(cfg *config.Config) Mode {
	switch level := cfg.DurabilityInForce(); {
	case cfg.NATSURL != "":
		return External
	case !cfg.Clustered() && level == config.DurabilityAcked:
		return Acked
	case !cfg.Clustered() && level == config.DurabilitySyncAlways:
		return ServerFsync
	case !cfg.Clustered():
		return NodeRounds
	case level == config.DurabilityAcked:
		return ClusterAcked
	case cfg.ServerSyncAlways():
		return ClusterFsync
	}
	return ClusterRounds
}

// Clustered says whether the mode is an embedded cluster's.
func (m Mode) Clustered() bool { return m >= ClusterAcked }

// Meaning is the start-up log's sentence for the mode; warn says the log
// should warn (a power cut can lose a 2xx's writes).
func (m Mode) Meaning() (meaning string, warn bool) {
	switch m {
	case External:
		return "acked — sluice cannot sync an external server's disk; for a 2xx to survive a power cut, run that server with jetstream sync_interval: always (docs/RELIABILITY.md \"Durability levels\")", true
	case Acked:
		return "a 2xx after JetStream's ack (page cache): a power cut loses what the last record round (<= 1 s) or nats-server's sync interval did not sync", false
	case ServerFsync:
		return "a 2xx after nats-server fsynced each write", false
	case NodeRounds:
		return "a 2xx after its writes are on disk (group sync: one fdatasync round shared by concurrent hooks)", false
	case ClusterAcked:
		return "acked — a 2xx means a quorum of the cluster acked its writes in memory: a power cut of the whole cluster can lose them, and the cluster then starts on what is left (docs/RELIABILITY.md \"Durability levels\")", true
	case ClusterFsync:
		return "a 2xx means a quorum of the cluster fsynced its writes (nats-server fsyncs each Raft append, batched)", false
	}
	return "a 2xx after its writes are on disk on the servers holding them (the cluster's group sync: one round per server shared by concurrent hooks)", false
}

// Streams are the streams a 2xx (a granted reply, a dead letter's acked
// advisory) rests on: the ones a barrier round syncs and, on a cluster,
// must find led by a server that synced them. The others (events, leases,
// the captured advisories) are the record rounds'.
func Streams(cfg *config.Config) []string {
	names := kvstore.BucketNames(cfg.Prefix)
	streams := append(hooks.HooksStreams(cfg.HooksStream, cfg.Shards), hooks.OutboxStream(cfg.HooksStream),
		kvstore.StreamName(names.Replay), kvstore.StreamName(names.Limits), kvstore.StreamName(names.Tenants),
		kvstore.StreamName(names.Counts), hooks.DeadLetterStream)
	for k := range max(cfg.Shards, 1) {
		streams = append(streams, kvstore.StreamName(protocol.ClaimsBucket(cfg.Prefix, k)))
	}
	return streams
}

// ScopeStreams are the streams the writes of scope sc went to: the
// tenant's shard's hooks stream and claims bucket, the replay bucket, the
// dead letters' stream.
func ScopeStreams(cfg *config.Config, sc kvstore.SyncScope) []string {
	var out []string
	if sc.Tenant != "" {
		k := protocol.Shard(sc.Tenant, max(cfg.Shards, 1))
		out = append(out, protocol.ShardName(cfg.HooksStream, k), kvstore.StreamName(protocol.ClaimsBucket(cfg.Prefix, k)))
	}
	if sc.Replay {
		out = append(out, kvstore.StreamName(kvstore.BucketNames(cfg.Prefix).Replay))
	}
	if sc.DeadLetters {
		out = append(out, hooks.DeadLetterStream)
	}
	return out
}

// ClusterBarrier is the ClusterRounds barrier: each of its rounds runs
// round (a Rounds's Round). A round that left streams
// unconfirmed fails only the callers whose scope wrote to them
// (kvstore.PartialSyncError); any other failed round is
// kvstore.ErrRoundMissed for its callers and does not latch.
func ClusterBarrier(cfg *config.Config, round func() error) *kvstore.GroupSync {
	return kvstore.NewGroupSync(func() error {
		err := round()
		var u *UnconfirmedError
		switch {
		case errors.As(err, &u):
			unconfirmed := map[string]bool{}
			for _, s := range u.Streams {
				unconfirmed[s] = true
			}
			return &kvstore.PartialSyncError{Err: err, Affects: func(sc kvstore.SyncScope) bool {
				return slices.ContainsFunc(ScopeStreams(cfg, sc), func(s string) bool { return unconfirmed[s] })
			}}
		case err != nil:
			return fmt.Errorf("%w: %w", kvstore.ErrRoundMissed, err)
		}
		return nil
	})
}

// HubThen is what a hub's answer to a leaf's sync request waits on: the
// barrier its own 2xx waits on (sync, in NodeRounds and ClusterRounds),
// the single node's group sync (group) at Acked too; nil — answered at
// once — where the acks already mean durable (ServerFsync, ClusterFsync)
// or nothing local can vouch for more (External, ClusterAcked).
func HubThen(m Mode, sync kvstore.Syncer, group *kvstore.GroupSync) func(func(error)) func() {
	if t, ok := sync.(kvstore.ThenSyncer); ok {
		return t.Then
	}
	if m == Acked && group != nil {
		return group.Then
	}
	return nil
}
