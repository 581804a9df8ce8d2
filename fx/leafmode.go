package fx

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	uberfx "go.uber.org/fx"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
)

// leafConfig sets the embedded server's JetStream domain and leaf
// connections: a hub's listener (--leaf-listen, or the file's), or a
// leaf's remote to its hub (--hub-url, or the file's remotes; --leaf-name:
// docs/LEAF-MODE.md).
func leafConfig(cfg *config.Config, sc *natsembed.ServerConfig) {
	if !cfg.Leaf() {
		sc.LeafListen = cfg.LeafListen
		if cfg.Hub() {
			// Leaves address this hub by its domain, and reach its owners on
			// their own subjects.
			sc.JetStreamDomain = cfg.HubDomain
			from, to := quota.HubMapping(cfg.Prefix)
			sc.Mappings = map[string]string{from: to}
		}
		return
	}
	// The leaf's server name and JetStream domain are its name (unique
	// among the hub's leaves).
	sc.Name, sc.JetStreamDomain = cfg.LeafName, cfg.LeafName
	sc.LeafRemotes = cfg.HubURLs
	sc.LeafDeny, sc.LeafDenyImports = hooks.LeafDeny(cfg.Prefix)
}

// Forward is a leaf's forwarder (nil Forwarder when the node is not a
// leaf).
type Forward struct {
	Forwarder *forward.Forwarder
}

// ProvideForward creates a leaf's outbox and its forwarder (started with
// the app, stopped before the NATS connection drains); on a hub
// (--leaf-listen) it serves the leaves' sync barrier (serveHubSync).
func ProvideForward(lc uberfx.Lifecycle, cfg *config.Config, n *NATS, s *Stores, ev *Events, q *Quota, reg *Registry, log *slog.Logger) (*Forward, error) {
	if !cfg.Leaf() {
		if cfg.Hub() {
			serveHubSync(lc, n, log)
		}
		return &Forward{}, nil
	}
	ctx, cancel := n.startContext(cfg)
	defer cancel()
	if _, err := hooks.EnsureOutbox(ctx, n.JS, hooks.OutboxConfig{
		HooksStream: cfg.HooksStream, Prefix: cfg.Prefix, MaxBytes: cfg.HooksMaxBytes,
	}); err != nil {
		return nil, storageError(n, err)
	}
	f, err := forward.New(forward.Config{
		Conn: n.Conn, Prefix: cfg.Prefix, HooksStream: cfg.HooksStream, HubDomain: cfg.HubDomain, Name: cfg.LeafName,
		Linked: n.Server.LeafConnected, Logger: log.With("component", "forward"), Registerer: reg,
		HubClaims: s.HubClaims.Get, HubShards: s.HubShards, PendingTTL: cfg.PendingTTL, DedupeTTL: cfg.DedupeTTL, OnSplit: ev.Publisher.ClaimSplit,
		Route: q.Route,
	})
	if err != nil {
		return nil, err
	}
	lc.Append(uberfx.Hook{OnStart: f.Start, OnStop: f.Stop})
	return &Forward{Forwarder: f}, nil
}

// leafClaims is a leaf's claim store: the hub's claims bucket (opened
// through the hub's JetStream domain on first use) while the link is up
// and it answers, the leaf's own (local) otherwise (forward.Claims).
func leafClaims(cfg *config.Config, n *NATS, local claims.Store, log *slog.Logger) (*forward.Lazy, *forward.Claims, func(context.Context) (int, error)) {
	shards := hubShards(cfg, n)
	hub := forward.NewLazy(func(ctx context.Context) (claims.Store, error) {
		js, err := jetstream.NewWithDomain(n.Conn, cfg.HubDomain)
		if err != nil {
			return nil, err
		}
		s, err := shards(ctx)
		if err != nil {
			return nil, err
		}
		stores := make([]claims.Store, 0, s)
		for k := range s {
			b, err := kvstore.OpenRemoteBucket(ctx, js, cfg.HubDomain, protocol.ClaimsBucket(cfg.Prefix, k))
			if err != nil {
				return nil, err
			}
			kv, err := claims.NewKV(b, claims.WithLogger(log))
			if err != nil {
				return nil, err
			}
			stores = append(stores, kv)
		}
		if s == 1 {
			return stores[0], nil
		}
		return claims.NewSharded(stores...)
	})
	return hub, forward.NewClaims(local, hub.Get, n.Server.LeafConnected), shards
}

// hubShards reads the hub's shard count from its fleet record (the
// leases bucket, through the hub's domain) once it can: a leaf sends each
// hook, and takes each claim, in its tenant's shard on the hub, whatever
// its own --partitions says. The count is fixed for the hub's life, so
// the first answer is kept.
func hubShards(cfg *config.Config, n *NATS) func(context.Context) (int, error) {
	var known atomic.Int64
	return func(ctx context.Context) (int, error) {
		if s := known.Load(); s > 0 {
			return int(s), nil
		}
		b, err := hubLeases(ctx, cfg, n)
		if err != nil {
			return 0, err
		}
		_, s, err := quota.FleetShape(ctx, b)
		if err != nil {
			return 0, fmt.Errorf("the hub's fleet record: %w", err)
		}
		known.Store(int64(s))
		return s, nil
	}
}

// hubLeases is a leaf's view of its hub's leases bucket (the fleet
// record), through the hub's JetStream domain.
func hubLeases(ctx context.Context, cfg *config.Config, n *NATS) (*kvstore.Bucket, error) {
	js, err := jetstream.NewWithDomain(n.Conn, cfg.HubDomain)
	if err != nil {
		return nil, err
	}
	return kvstore.OpenRemoteBucket(ctx, js, cfg.HubDomain, kvstore.BucketNames(cfg.Prefix).Leases)
}

// leafQuota is a leaf's quota: no worker of its own; a Router routed to
// the hub's owners through the hub's mapping (quota.HubPrefix), used while
// the Route says the hub decides (link up, same partition count), and the
// Fleet's node-local state otherwise, with 1/--split-share of each limit
// (docs/LEAF-MODE.md).
func leafQuota(cfg *config.Config, n *NATS, ev *Events, reg *Registry, log *slog.Logger) (*Quota, error) {
	qlog := log.With("component", "quota")
	route, err := forward.NewRoute(n.Server.LeafConnected, func(ctx context.Context) (int, error) {
		b, err := hubLeases(ctx, cfg, n)
		if err != nil {
			return 0, err
		}
		return quota.FleetPartitions(ctx, b)
	}, forward.WithPartitions(cfg.Partitions), forward.WithLogger(qlog), forward.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	client, err := quota.NewRouter(n.Conn, quota.WithPrefix(quota.HubPrefix(cfg.Prefix)), quota.WithPartitions(cfg.Partitions),
		quota.WithBudget(cfg.StoreTimeout), quota.WithReachable(route.Reachable))
	if err != nil {
		return nil, err
	}
	local, err := gcra.NewLimiter(gcra.WithMaxKeys(localMaxKeys))
	if err != nil {
		return nil, err
	}
	// Deciding alone, the leaf applies 1/--split-share of each limit (the
	// fallback's share among "members": the sides that may be cut off).
	share := cfg.SplitShare
	fleet, err := quota.NewFleet(client, local, ev.Claims, quota.WithPendingTTL(cfg.PendingTTL), quota.WithLogger(qlog),
		quota.WithRegisterer(reg), quota.WithMembers(func() int { return share }))
	if err != nil {
		return nil, err
	}
	return &Quota{Router: client, Fleet: fleet, Local: local, Route: route}, nil
}

// serveHubSync serves a hub node's sync barrier to its leaves
// (durability.Node.ServeHub) while the app runs.
func serveHubSync(lc uberfx.Lifecycle, n *NATS, log *slog.Logger) {
	var srv *durability.Server
	lc.Append(uberfx.Hook{
		OnStart: func(context.Context) error {
			var err error
			if srv, err = n.node.ServeHub(); err == nil {
				log.Debug("hub: serving the leaves' sync barrier", "mode", n.Mode)
			}
			return err
		},
		OnStop: func(context.Context) error { return srv.Stop() },
	})
}
