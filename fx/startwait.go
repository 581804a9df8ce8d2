package fx

import (
	"context"
	"time"

	"github.com/sluice-dev/sluice/config"
)

// ClusterStartWait bounds how long a node of an embedded cluster waits at
// start for the cluster: for JetStream to answer (a meta leader), for its
// buckets and streams to be created on their replicas, and for its start
// hooks. A fresh cluster elects its first meta leader only once every one
// of its servers runs (nats-server: empty servers never form a quorum
// among themselves), and a stream of --replicas 3 is created only once
// three servers are known: a node whose peers start later, or slowly on a
// loaded machine, waits for them instead of exiting after 30 s and leaving
// its peers, which need it, to fail in turn.
const ClusterStartWait = 10 * time.Minute

// nodeStartWait bounds each start-up step's JetStream calls on a node that
// waits for no peer: a single node (its own server), or --nats-url (a
// running deployment).
const nodeStartWait = 30 * time.Second

// StartWait is how long each step of cfg's start-up (a constructor's
// JetStream calls; with a cluster, the start hooks together too) may wait
// for JetStream before the start fails.
func StartWait(cfg *config.Config) time.Duration {
	if waitsForCluster(cfg) {
		return ClusterStartWait
	}
	return nodeStartWait
}

// waitsForCluster says whether cfg's node starts an embedded server of a
// cluster, whose start-up needs its peers.
func waitsForCluster(cfg *config.Config) bool {
	return cfg.NATSURL == "" && cfg.Clustered()
}

// Starting is the context a node's start-up waits in (Options):
// once it ends (cmd/edge: SIGTERM or SIGINT), every wait of the start-up
// ends and the start fails, rather than a stop waiting out StartWait.
type Starting struct {
	Ctx context.Context
}

// startContext is the context of one start-up step's JetStream calls:
// parent (nil: none) bounded by StartWait.
func startContext(parent context.Context, cfg *config.Config) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	return context.WithTimeout(parent, StartWait(cfg))
}

// startContext is startContext in the start-up n was made in.
func (n *NATS) startContext(cfg *config.Config) (context.Context, context.CancelFunc) {
	return startContext(n.starting, cfg)
}
