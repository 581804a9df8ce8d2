package durability

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/protocol"
)

// Node is what Start started on a node with an embedded server.
type Node struct {
	// Barrier is what a 2xx waits on: the NodeRounds and ClusterRounds
	// rows of the package doc's table, nil in the others.
	Barrier *GroupSync
	// Group is the embedded server's own group sync (nil on a cluster
	// at ClusterFsync or ClusterAcked): on a single node also the
	// record's sync at every level, on an R1 cluster the rounds it serves
	// the other nodes.
	Group *GroupSync

	cfg   Config
	store *storeSync // the rounds of the server's store
	stops []func()   // in the order they were started
}

// ServeHub serves a hub's sync barrier to its leaves (a leaf drops its
// outbox copy of a batch only once it answered): protocol.HubSyncSubject
// on the node's connection, in protocol.HubSyncQueue, each answer after a
// round of what HubThen says of the node's mode.
func (n *Node) ServeHub() (*Server, error) {
	var sync Syncer
	if n.Barrier != nil {
		sync = n.Barrier
	}
	return Serve(n.cfg.Conn, protocol.HubSyncSubject(n.cfg.Prefix), protocol.HubSyncQueue,
		HubThen(n.cfg.Mode(), sync, n.Group), HubAnswer{Durability: n.cfg.Level})
}

// SyncFinder says how the rounds find what changed since the last:
// "inotify" or "stat walk" (no inotify, or it failed). Known after the
// first round.
func (n *Node) SyncFinder() string { return n.store.finder() }

// Stop stops what Start started, last first.
func (n *Node) Stop() {
	for i := len(n.stops) - 1; i >= 0; i-- {
		n.stops[i]()
	}
	n.stops = nil
}

// Start starts what cfg's mode needs on a node whose embedded server is
// cfg.Server (connected by cfg.Conn and cfg.JS): the start check against the data dir's record
// (refuse to come up silently empty), the record's keeper, the server's
// own group sync, and on an R1 cluster the answers to the other nodes'
// rounds and the cluster barrier. Its counters are registered as
// sluice_store_sync_* and sluice_cluster_sync_*. A failed Start leaves
// nothing running.
//
// On a cluster, ctx bounds the wait for the streams of the node's record to
// be back at their recorded sequences (the cluster forming, leaders
// elected, replicas caught up; fx gives it the start-up's context: up to
// fx.ClusterStartWait, and a signal ends it): what is still short when the
// cluster's answers stop moving is a loss, and the start is refused.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry() // counted, exported nowhere
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg}
	if err := n.start(ctx, cfg); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context, cfg Config) error {
	m, srv, log := cfg.Mode(), cfg.Server, cfg.Logger
	dlog := log.With("component", "durability")
	n.store = newStoreSync(srv.StoreDir(), dlog)
	n.stops = append(n.stops, n.store.close)
	if !m.Clustered() {
		if err := checkStart(srv, cfg.DataDir, cfg.AcceptDataLoss, log); err != nil {
			return err
		}
		g := n.startGroupSync(cfg)
		if err := n.startRecord(cfg, dlog); err != nil {
			return err
		}
		if m == NodeRounds {
			n.Barrier = g
		}
		return nil
	}
	if m == ClusterAcked {
		return nil // nothing local can vouch for a replicated stream's writes: no record
	}
	// The others' barriers need this server's answers while it waits for
	// the cluster below: served from now on.
	var then Barrier
	if m == ClusterRounds {
		then = n.startGroupSync(cfg)
	}
	serving, err := Serve(cfg.Conn, protocol.NodeSyncSubject(cfg.Prefix), "", then, newNodeAnswer(srv, cfg.Streams()))
	if err != nil {
		return err
	}
	n.stops = append(n.stops, func() { _ = serving.Stop() })
	if err := CheckClusterStart(ctx, cfg.DataDir, cfg.AcceptDataLoss, dlog, streamSeqs(cfg.JS)); err != nil {
		return err
	}
	if err := n.startRecord(cfg, dlog); err != nil {
		return err
	}
	if m == ClusterRounds {
		n.Barrier, err = n.startClusterBarrier(cfg)
		return err
	}
	return nil
}

// streamSeqs reads the last sequence of each named stream that exists,
// as the cluster sees it.
func streamSeqs(js jetstream.JetStream) func(ctx context.Context, names []string) (map[string]uint64, error) {
	return func(ctx context.Context, names []string) (map[string]uint64, error) {
		now := make(map[string]uint64, len(names))
		for _, name := range names {
			ictx, icancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := js.Stream(ictx, name)
			if err == nil {
				var info *jetstream.StreamInfo
				if info, err = st.Info(ictx); err == nil {
					now[name] = info.State.LastSeq
				}
			}
			icancel()
			if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil, err
			}
		}
		return now, nil
	}
}

// startGroupSync starts the embedded server's own group sync (Group):
// its rounds sync the streams answers rest on (Streams); the record's
// rounds (once a second) sync every stream.
func (n *Node) startGroupSync(cfg Config) *GroupSync {
	g := NewGroupSync(n.store.roundOver(cfg.Streams()))
	n.stops = append(n.stops, g.Close)
	n.Group = g
	registerSyncMetrics(cfg.Registerer, "store", "Group sync rounds by length (each syncs the store files written since the last): the device's flush latency as a 2xx meets it.", g)
	return g
}

// startRecord syncs what the store holds at start (what a restart
// recovered may be in the page cache only) and starts the stream record's
// keeper (stopped before the group sync).
func (n *Node) startRecord(cfg Config, log *slog.Logger) error {
	if err := n.store.round(); err != nil {
		return fmt.Errorf("durability: syncing the store at start: %w", err)
	}
	rec := StartRecorder(cfg.Server, cfg.DataDir, func(context.Context) error { return n.store.round() }, log)
	n.stops = append(n.stops, rec.Stop)
	return nil
}

// startClusterBarrier starts the barrier a 2xx waits on at ClusterRounds:
// its rounds ask every node for a round of its own group sync.
func (n *Node) startClusterBarrier(cfg Config) (*GroupSync, error) {
	round, err := NewRounds(cfg.Conn, protocol.NodeSyncSubject(cfg.Prefix), ClusterOf(cfg.Server, cfg.JS, cfg.Streams()))
	if err != nil {
		return nil, err
	}
	n.stops = append(n.stops, func() { _ = round.Close() })
	barrier := ClusterBarrier(cfg, round.Round)
	n.stops = append(n.stops, barrier.Close) // the barrier stops before its answers
	registerSyncMetrics(cfg.Registerer, "cluster", "Cluster barrier rounds by length (each asks every node for a round of its group sync).", barrier)
	return barrier, nil
}

// registerSyncMetrics exports a group sync's counters as
// sluice_<what>_sync_*; rounds is the help of its round histogram.
func registerSyncMetrics(reg prometheus.Registerer, what, rounds string, g *GroupSync) {
	counter := func(name, help string, v func(SyncStats) float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_" + what + "_sync_" + name, Help: help},
			func() float64 { return v(g.Stats()) }))
	}
	reg.MustRegister(roundCollector{g: g, desc: prometheus.NewDesc("sluice_"+what+"_sync_round_seconds", rounds, nil, nil)})
	counter("waits_total", "Waits on the "+what+" sync (a 2xx or granted reply each; waits/rounds is the coalescing).",
		func(s SyncStats) float64 { return float64(s.Waits) })
	counter("failures_total", "Rounds of the "+what+" sync that failed (the store's: the node then answers 503 until restarted; the cluster's: that round's hooks get a 503).",
		func(s SyncStats) float64 { return float64(s.Failures) })
}

// roundCollector exports a group sync's rounds as a histogram of their
// lengths (SyncStats.Lengths): its count is the rounds run, its
// sum the time spent in them.
type roundCollector struct {
	g    *GroupSync
	desc *prometheus.Desc
}

func (c roundCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c roundCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.g.Stats()
	buckets := make(map[float64]uint64, len(s.Lengths))
	var n uint64
	for i, bound := range SyncRoundBounds() {
		n += s.Lengths[i]
		buckets[bound.Seconds()] = n
	}
	n += s.Lengths[len(s.Lengths)-1] // the count: the buckets' own, read together
	ch <- prometheus.MustNewConstHistogram(c.desc, n, s.Time.Seconds(), buckets)
}
