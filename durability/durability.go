// Package durability says what a 2xx waits for. The mode is chosen in one
// place (Config.Mode) from the node's configuration (a Config, which fx
// fills from the flags); Start starts what the mode needs on a node with
// an embedded server, and fx hands its barrier (a Syncer, nil
// where the ack is the promise) to the edge, the service and the owner.
// docs/RELIABILITY.md "Durability levels" says what each level promises.
//
//	mode            configuration                          a 2xx waits for                                   barrier
//	External        --nats-url                             the external server's ack (its sync is its own)   nil
//	Acked           single node, acked                     the ack (page cache; the record round syncs <=1 s) nil
//	ServerFsync     single node, sync-always               the ack, sent after nats-server's fsync           nil
//	NodeRounds      single node, synced (default)          a round of the node's group sync                  GroupSync over Server.SyncStreams
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
// sync. A hub answers its leaves with the same Serve over HubThen
// (Node.ServeHub): an edge drops a forwarded batch from its outbox only
// after that answer.
package durability

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Mode is what a 2xx waits for; Config.Mode chooses it.
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

// Config is what durability needs of a node's configuration; fx fills it
// from config.Config (the flags).
type Config struct {
	// The four inputs of the mode (Mode): an external server
	// (--nats-url), an embedded cluster, the level in force being acked,
	// nats-server fsyncing every write itself (config.ServerSyncAlways:
	// sync-always, or synced on a cluster with --replicas > 1).
	External, Clustered, Acked, ServerFsync bool
	// Level is the level in force (config.DurabilityInForce), as a hub's
	// answer to its leaves says it.
	Level string

	// DataDir holds the stream record (RecordFile); AcceptDataLoss starts
	// on a store that lost what its record says it made durable.
	DataDir        string
	AcceptDataLoss bool
	// Prefix is the subjects' (protocol.NodeSyncSubject, HubSyncSubject)
	// and the buckets' (kvstore.BucketNames).
	Prefix string
	// HooksStream is the hooks streams' name (one per shard:
	// protocol.ShardName), OutboxStream a leaf's outbox, Shards the
	// shard count (0: one).
	HooksStream, OutboxStream string
	Shards                    int

	// What Start runs on: the embedded server, connected by Conn and JS;
	// its counters are registered on Registerer (nil: none), its lines
	// logged to Logger (nil: none).
	Server     Embedded
	Conn       *nats.Conn
	JS         jetstream.JetStream
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Mode is the mode of a node configured by c: the only place the four
// inputs (--nats-url, --durability, a cluster, --replicas) are combined.
func (c Config) Mode() Mode {
	switch {
	case c.External:
		return External
	case !c.Clustered && c.Acked:
		return Acked
	case !c.Clustered && c.ServerFsync:
		return ServerFsync
	case !c.Clustered:
		return NodeRounds
	case c.Acked:
		return ClusterAcked
	case c.ServerFsync:
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
func (c Config) Streams() []string {
	names := kvstore.BucketNames(c.Prefix)
	streams := []string{c.OutboxStream, kvstore.StreamName(names.Replay), kvstore.StreamName(names.Limits),
		kvstore.StreamName(names.Tenants), kvstore.StreamName(names.Counts), protocol.DeadLetterStream}
	for k := range max(c.Shards, 1) {
		streams = append(streams, protocol.ShardName(c.HooksStream, k), kvstore.StreamName(protocol.ClaimsBucket(c.Prefix, k)))
	}
	return streams
}

// ScopeStreams are the streams the writes of scope sc went to: the
// tenant's shard's hooks stream and claims bucket, the replay bucket, the
// dead letters' stream.
func (c Config) ScopeStreams(sc SyncScope) []string {
	var out []string
	if sc.Tenant != "" {
		k := protocol.Shard(sc.Tenant, max(c.Shards, 1))
		out = append(out, protocol.ShardName(c.HooksStream, k), kvstore.StreamName(protocol.ClaimsBucket(c.Prefix, k)))
	}
	if sc.Replay {
		out = append(out, kvstore.StreamName(kvstore.BucketNames(c.Prefix).Replay))
	}
	if sc.DeadLetters {
		out = append(out, protocol.DeadLetterStream)
	}
	return out
}

// ClusterBarrier is the ClusterRounds barrier: each of its rounds runs
// round (a Rounds's Round). A round that left streams
// unconfirmed fails only the callers whose scope wrote to them
// (PartialSyncError); any other failed round is
// ErrRoundMissed for its callers and does not latch.
func ClusterBarrier(cfg Config, round func() error) *GroupSync {
	return NewGroupSync(func() error {
		err := round()
		var u *UnconfirmedError
		switch {
		case errors.As(err, &u):
			unconfirmed := map[string]bool{}
			for _, s := range u.Streams {
				unconfirmed[s] = true
			}
			return &PartialSyncError{Err: err, Affects: func(sc SyncScope) bool {
				return slices.ContainsFunc(cfg.ScopeStreams(sc), func(s string) bool { return unconfirmed[s] })
			}}
		case err != nil:
			return fmt.Errorf("%w: %w", ErrRoundMissed, err)
		}
		return nil
	})
}

// HubThen is what a hub's answer to a leaf's sync request waits on: the
// barrier its own 2xx waits on (sync, in NodeRounds and ClusterRounds),
// the single node's group sync (group) at Acked too; nil — answered at
// once — where the acks already mean durable (ServerFsync, ClusterFsync)
// or nothing local can vouch for more (External, ClusterAcked).
func HubThen(m Mode, sync Syncer, group *GroupSync) Barrier {
	if t, ok := sync.(ThenSyncer); ok {
		return t
	}
	if m == Acked && group != nil {
		return group
	}
	return nil
}
