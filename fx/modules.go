package fx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	uberfx "go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/cooldown"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/httpapi"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/placement"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/owner"
	"github.com/sluice-dev/sluice/service"
	"github.com/sluice-dev/sluice/tenants"
)

// Module is the whole node: NATS, stores, quota worker, events, the micro
// service and the HTTP server. Supply a *config.Config and a *slog.Logger.
var Module = uberfx.Options(
	uberfx.Provide(
		ProvideRegistry,
		ProvideTracing,
		ProvideNATS,
		ProvideStores,
		ProvideQuota,
		ProvideEvents,
		ProvideForward,
		ProvideService,
		ProvideHTTP,
	),
	// The settler starts before the service and the HTTP server: /readyz
	// answers 200 only once every part has started. The service is
	// resolved before the HTTP server so that, stopping in reverse order,
	// the HTTP server stops first.
	uberfx.Invoke(StartSettler),
	uberfx.Invoke(func(*Service, *HTTP) {}),
	uberfx.Invoke(WatchStorage),
)

// Options returns the fx options of a complete node for cfg, with fx's own
// log routed through log. The start-up ends, failing, once ctx ends
// (Starting): a node of a cluster may wait for its peers for long.
func Options(ctx context.Context, cfg *config.Config, log *slog.Logger) uberfx.Option {
	return uberfx.Options(
		uberfx.Supply(cfg, log, Starting{Ctx: ctx}),
		uberfx.WithLogger(func() fxevent.Logger {
			l := &fxevent.SlogLogger{Logger: log.With("component", "fx")}
			l.UseLogLevel(slog.LevelDebug)
			// A failed constructor or hook is returned to the caller, which
			// logs its cause once (cmd/edge: the last line); fx's own
			// account of it, with the wiring and a stack, is for debugging.
			l.UseErrorLevel(slog.LevelDebug)
			return l
		}),
		uberfx.StopTimeout(10*time.Second),
		startTimeout(cfg),
		undoOnBuildFailure(),
		Module,
	)
}

// startTimeout is the app's start timeout (App.StartTimeout: its start
// hooks together): ClusterStartWait on a node of an embedded cluster, whose
// hooks create the settler's stream and consumers on replicas that its
// peers must be up to hold; fx's default elsewhere.
func startTimeout(cfg *config.Config) uberfx.Option {
	if !waitsForCluster(cfg) {
		return uberfx.Options()
	}
	return uberfx.StartTimeout(ClusterStartWait)
}

// Registry is the Prometheus registry of one app (not the global one, so
// several apps can run in one process, as the tests do).
type Registry struct {
	*prometheus.Registry
}

// ProvideRegistry returns a fresh registry with the Go and process
// collectors.
func ProvideRegistry() *Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Registry{r}
}

// Stores are the KV-backed stores and their node-local fallbacks.
type Stores struct {
	// ClaimsBuckets are the claims buckets of the fleet's shards (shard k
	// at index k, --partitions P/S: S of them; protocol.ClaimsBucket);
	// ClaimsBucket is shard 0's.
	ClaimsBuckets []*kvstore.Bucket
	ClaimsBucket  *kvstore.Bucket
	Claims        claims.Store // fleet (KV: claims.Sharded over the shards' buckets)
	Replay        claims.ReplayStore
	Cooldown      *cooldown.Store
	Overrides     *httpapi.Overrides
	// Tenants follows the tenant records; Policy combines them with the
	// file's tenants (Policy.Reload on SIGHUP).
	Tenants *tenants.Registry
	Policy  *tenants.Policy
	// HubClaims is a leaf's view of its hub's claims bucket (nil unless
	// --hub-url): Claims then takes claims there while the hub answers.
	HubClaims *forward.Lazy
	// LeafClaims is Claims on a leaf (nil unless --hub-url).
	LeafClaims *forward.Claims
	// HubShards reads a leaf's hub's shard count (nil unless --hub-url).
	HubShards func(context.Context) (int, error)
}

// ProvideStores opens the buckets and builds the stores.
func ProvideStores(lc uberfx.Lifecycle, cfg *config.Config, n *NATS, prom *Registry, log *slog.Logger) (*Stores, error) {
	ctx, cancel := n.startContext(cfg)
	defer cancel()
	names := kvstore.BucketNames(cfg.Prefix)
	cbs, store, err := openClaims(ctx, cfg, n, log)
	if err != nil {
		return nil, err
	}
	rb, err := kvstore.OpenBucket(ctx, n.JS, claims.ReplayBucketConfig(names.Replay, cfg.ReplayCapacity, cfg.Replicas))
	if err != nil {
		return nil, err
	}
	lb, err := kvstore.OpenBucket(ctx, n.JS, kvstore.BucketConfig{
		Name: names.Limits, Description: "sluice tenant limit overrides", Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, err
	}
	cdb, err := kvstore.OpenBucket(ctx, n.JS, cooldown.BucketConfig(cfg.Prefix, cfg.Replicas))
	if err != nil {
		return nil, err
	}
	replay, err := claims.NewKVReplay(rb)
	if err != nil {
		return nil, err
	}
	cd, err := cooldown.New(cdb, cooldown.WithBudget(cfg.StoreTimeout), cooldown.WithLogger(log))
	if err != nil {
		return nil, err
	}
	tb, err := kvstore.OpenBucket(ctx, n.JS, tenants.BucketConfig(cfg.Prefix, cfg.Replicas))
	if err != nil {
		return nil, err
	}
	var keys *tenants.Keyring
	if cfg.SecretsKeyFile != "" {
		if keys, err = tenants.LoadKeyring(cfg.SecretsKeyFile); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	reg := tenants.NewRegistry(tb, tenants.WithKeys(keys), tenants.WithLogger(log.With("component", "tenants")))
	if err := reg.Register(prom); err != nil {
		return nil, err
	}
	var fleetClaims claims.Store = store
	var hubClaims *forward.Lazy
	var leafStore *forward.Claims
	var s0 func(context.Context) (int, error)
	if cfg.Leaf() {
		hubClaims, leafStore, s0 = leafClaims(cfg, n, store, log)
		fleetClaims = leafStore
	}
	s := &Stores{
		ClaimsBuckets: cbs,
		ClaimsBucket:  cbs[0],
		Claims:        fleetClaims,
		HubClaims:     hubClaims,
		LeafClaims:    leafStore,
		HubShards:     s0,
		Replay:        replay,
		Cooldown:      cd,
		Overrides:     httpapi.NewOverrides(lb, log),
		Tenants:       reg,
		Policy:        tenants.NewPolicy(cfg, reg),
	}
	if err := s.Policy.Register(prom); err != nil {
		return nil, err
	}
	lc.Append(uberfx.Hook{
		OnStart: s.Overrides.Start,
		OnStop:  func(context.Context) error { s.Overrides.Stop(); return nil },
	})
	lc.Append(uberfx.Hook{
		OnStart: reg.Start,
		OnStop:  func(context.Context) error { reg.Stop(); return nil },
	})
	return s, nil
}

// openClaims opens the claims bucket of every shard (--partitions P/S) and
// the store routing each claim to its tenant's shard.
func openClaims(ctx context.Context, cfg *config.Config, n *NATS, log *slog.Logger) ([]*kvstore.Bucket, claims.Store, error) {
	shards := max(cfg.Shards, 1)
	place := placement.For(cfg, n.Server, log)
	buckets := make([]*kvstore.Bucket, 0, shards)
	stores := make([]claims.Store, 0, shards)
	for k := range shards {
		name := protocol.ClaimsBucket(cfg.Prefix, k)
		bc := claims.BucketConfig(name, cfg.Replicas,
			claims.WithExpiryEvents(cfg.ClaimExpiryEvents), claims.WithAsyncPersist(cfg.ClaimsPersist == config.PersistAsync))
		if place != nil {
			bc.Placement = place(k)
		}
		cb, err := kvstore.OpenBucket(ctx, n.JS, bc)
		if errors.Is(err, kvstore.ErrPersistMode) {
			return nil, nil, fmt.Errorf("--claims-persist %s: %w; keep the setting the bucket was created with, or delete the "+
				"bucket %s (its claims are lost: keys seen within --dedupe-ttl may be accepted once more)", cfg.ClaimsPersist, err, name)
		}
		if err != nil {
			return nil, nil, err
		}
		store, err := claims.NewKV(cb, claims.WithLogger(log))
		if err != nil {
			return nil, nil, err
		}
		buckets, stores = append(buckets, cb), append(stores, store)
	}
	if shards == 1 {
		return buckets, stores[0], nil
	}
	sharded, err := claims.NewSharded(stores...)
	return buckets, sharded, err
}

// Quota is this node's partition worker and the Router to the owners.
type Quota struct {
	Worker *owner.Worker // nil on a leaf (--hub-url): its hub's owners decide
	Router *quota.Router
	Fleet  *quota.Fleet
	Local  *gcra.Limiter
	Route  *forward.Route // a leaf's: hub or local (nil on other nodes)
}

// ProvideQuota builds the worker (started with the app: it takes its share
// of partition leases; stopped first among the NATS users: it releases
// them), the client and the fleet wrapper. A leaf has no worker: its
// client routes to the hub's owners while its Route says so.
func ProvideQuota(lc uberfx.Lifecycle, cfg *config.Config, n *NATS, s *Stores, ev *Events, reg *Registry, log *slog.Logger) (*Quota, error) {
	if cfg.Leaf() {
		return leafQuota(cfg, n, ev, reg, log)
	}
	ctx, cancel := n.startContext(cfg)
	defer cancel()
	leases, counts, err := quota.OpenBuckets(ctx, n.JS, cfg.Prefix, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	prefix, partitions := quota.WithPrefix(cfg.Prefix), quota.WithPartitions(cfg.Partitions)
	pending, logger, metrics := quota.WithPendingTTL(cfg.PendingTTL), quota.WithLogger(log.With("component", "quota")), quota.WithRegisterer(reg)
	// A settle in a frame and a granted reserve are answered once durable,
	// as claims.settle's (the counts bucket is in the barrier's rounds).
	durable := []owner.Option{owner.WithSync(n.Sync), owner.WithDedupeTTL(cfg.DedupeTTL), owner.WithShards(max(cfg.Shards, 1))}
	w, err := owner.New(n.Conn, leases, counts, ev.Claims, append(durable, prefix, partitions, pending, logger, metrics)...)
	if err != nil {
		return nil, err
	}
	// The HTTP handler and the service reach this node's own partitions in process.
	client, err := quota.NewRouter(n.Conn, prefix, partitions, quota.WithBudget(cfg.StoreTimeout), quota.WithLocalOwner(w))
	if err != nil {
		return nil, err
	}
	local, err := gcra.NewLimiter(gcra.WithMaxKeys(localMaxKeys))
	if err != nil {
		return nil, err
	}
	fleet, err := quota.NewFleet(client, local, ev.Claims, pending, logger, metrics, quota.WithMembers(w.Members))
	if err != nil {
		return nil, err
	}
	lc.Append(uberfx.Hook{OnStart: w.Start, OnStop: w.Stop})
	return &Quota{Worker: w, Router: client, Fleet: fleet, Local: local}, nil
}

// Events are the lifecycle publisher, the
// expiry watcher, and the claim stores decorated to publish lifecycle events.
type Events struct {
	Publisher *events.Publisher
	Expiry    []*events.ExpiryWatcher // one per shard's claims bucket; none without --claim-expiry-events
	Claims    claims.Store            // Stores.Claims, publishing pending/committed/released
}

// ProvideEvents builds and starts the events parts.
func ProvideEvents(lc uberfx.Lifecycle, cfg *config.Config, n *NATS, s *Stores, reg *Registry, log *slog.Logger) (*Events, error) {
	elog := log
	pub, err := events.NewPublisher(n.Conn, cfg.Prefix, events.WithLogger(elog), events.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	observed := events.ObserveStore(s.Claims, pub)
	var exps []*events.ExpiryWatcher
	for _, b := range s.ClaimsBuckets {
		if !cfg.ClaimExpiryEvents { // else the claims buckets write no markers to watch
			break
		}
		exp, err := events.NewExpiryWatcher(n.JS, b.Name(), pub, events.WithLogger(elog), events.WithRegisterer(reg))
		if err != nil {
			return nil, err
		}
		exps = append(exps, exp)
		lc.Append(uberfx.Hook{OnStart: exp.Start, OnStop: func(context.Context) error { exp.Stop(); return nil }})
	}
	lc.Append(uberfx.StopHook(pub.Close))
	return &Events{Publisher: pub, Expiry: exps, Claims: observed}, nil
}

// StartSettler builds and starts the settle-by-subject consumer (settles
// through the quota Router, releases to the claims store). It starts after
// the quota worker and stops before it, the service and the HTTP server
// (Module's uberfx.Invoke order): /readyz is 200 only once it runs.
func StartSettler(lc uberfx.Lifecycle, cfg *config.Config, n *NATS, ev *Events, q *Quota, reg *Registry, log *slog.Logger) error {
	opts := []events.SettlerOption{events.WithLogger(log), events.WithReplicas(cfg.Replicas), events.WithRegisterer(reg)}
	if n.Server != nil {
		// The stream's byte limit is reserved from the store: fit it.
		opts = append(opts, events.WithStreamLimits(events.DefaultStreamMaxAge, events.DefaultStreamMaxMsgs, events.StreamBytesFor(n.Server.MaxStore())))
	}
	settler, err := events.NewSettler(n.JS, ev.Claims, q.Router, cfg.Prefix, opts...)
	if err != nil {
		return storageError(n, err)
	}
	lc.Append(uberfx.Hook{
		OnStart: func(ctx context.Context) error { return storageError(n, settler.Start(ctx)) },
		OnStop:  func(context.Context) error { settler.Stop(); return nil },
	})
	return nil
}

// Service holds the `sluice` micro service once the app has started.
type Service struct {
	S *service.Service
}

// ProvideService registers the `sluice` micro service on start.
func ProvideService(lc uberfx.Lifecycle, cfg *config.Config, n *NATS, s *Stores, ev *Events, q *Quota, reg *Registry, tr *Tracing, log *slog.Logger) (*Service, error) {
	out := &Service{}
	lc.Append(uberfx.Hook{
		OnStart: func(context.Context) error {
			svc, err := service.New(n.Conn, service.Config{
				Prefix:       cfg.Prefix,
				Partitions:   cfg.Partitions,
				Quota:        q.Router,
				Claims:       ev.Claims,
				Replay:       s.Replay,
				Cooldown:     s.Cooldown,
				Events:       ev.Publisher,
				Sync:         n.Sync,
				StoreTimeout: cfg.StoreTimeout,
				Tracer:       tr.P.Tracer(),
				Logger:       log.With("component", "service"),
				Registerer:   reg,
			})
			out.S = svc
			return err
		},
		OnStop: func(context.Context) error {
			if out.S == nil {
				return nil
			}
			return out.S.Stop()
		},
	})
	return out, nil
}

// HTTP is the node's HTTP server.
type HTTP struct {
	Server  *http.Server
	Handler *httpapi.Handler
	// Addr is the bound address once started.
	Addr atomic.Pointer[string]
}

// ProvideHTTP builds the handler and the HTTP server. OnStart binds the
// listener (a bind failure fails start-up) and serves in a goroutine;
// OnStop stops accepting and waits for in-flight requests.
func ProvideHTTP(lc uberfx.Lifecycle, cfg *config.Config, n *NATS, s *Stores, ev *Events, q *Quota, fw *Forward, reg *Registry, tr *Tracing, log *slog.Logger) (*HTTP, error) {
	ctx, cancel := n.startContext(cfg)
	defer cancel()
	maxAge := cfg.HooksMaxAge
	if maxAge == 0 { // --hooks-max-age 0: keep forever
		maxAge = -1
	}
	// A leaf stores hooks in its outbox (ProvideForward), never in a local
	// stream on the hub's subjects: that would capture the forwarder's
	// publishes to the hub.
	store := hooks.NewOutboxStore(n.JS, cfg.Prefix, cfg.HooksStream)
	if fw.Forwarder == nil {
		hs, err := hooks.EnsureHub(ctx, n.JS, hooks.StreamConfig{
			Name: cfg.HooksStream, Prefix: cfg.Prefix, Replicas: cfg.Replicas, Shards: cfg.Shards,
			MaxAge: maxAge, MaxBytes: placement.Bytes(cfg.HooksMaxBytes, cfg.Shards),
		}, placement.For(cfg, n.Server, log), reg)
		if err != nil {
			return nil, err
		}
		store = hs
		var dead *hooks.DeadLetters
		lc.Append(uberfx.Hook{
			OnStart: func(ctx context.Context) (err error) {
				dead, err = hooks.StartDeadLetters(ctx, n.JS, cfg.Prefix, n.Sync, reg, log.With("component", "deadletters"))
				return err
			},
			OnStop: func(context.Context) error {
				if dead != nil {
					dead.Stop()
				}
				return nil
			},
		})
		streams := hooks.HooksStreams(cfg.HooksStream, cfg.Shards)
		for _, b := range s.ClaimsBuckets {
			streams = append(streams, kvstore.StreamName(b.Name()))
		}
		bctx, stop := context.WithCancel(context.Background())
		var done sync.WaitGroup
		lc.Append(uberfx.Hook{
			OnStart: func(context.Context) error {
				done.Go(func() { placement.Balance(bctx, cfg, n.Server, n.Conn, n.JS, streams, log) })
				return nil
			},
			OnStop: func(context.Context) error { stop(); done.Wait(); return nil },
		})
	}
	var ready atomic.Bool
	var readyInfo func() any
	if fw.Forwarder != nil {
		readyInfo = func() any { return fw.Forwarder.Status() }
	}
	var admitter httpapi.Admitter = q.Fleet
	if s.LeafClaims != nil {
		// A claim the hub's owners took is settled in the hub's bucket.
		admitter = forward.Admission{Fleet: q.Fleet, Claims: s.LeafClaims}
	}
	admin, err := tenants.NewAdmin(s.Tenants, s.Policy, tenants.WithLogger(log.With("component", "admin")), tenants.WithTimeout(cfg.StoreTimeout))
	if err != nil {
		return nil, err
	}
	out := &HTTP{}
	shards, err := shardMap(lc, cfg, n, s, out, log)
	if err != nil {
		return nil, err
	}
	h, err := httpapi.New(httpapi.Config{
		Shards:         shards,
		Policy:         s.Policy,
		Limits:         s.Policy.Limits,
		Overrides:      s.Overrides,
		Admitter:       admitter,
		Resetter:       q.Fleet,
		Claims:         ev.Claims,
		Replay:         s.Replay,
		Hooks:          store,
		Sync:           n.Sync,
		Durability:     n.Durability,
		Lifecycle:      ev.Publisher,
		Tracer:         tr.P.Tracer(),
		PendingTTL:     cfg.PendingTTL,
		DedupeTTL:      cfg.DedupeTTL,
		StoreTimeout:   cfg.StoreTimeout,
		MaxInFlight:    cfg.MaxInFlightHooks,
		MaxPayload:     n.Conn.MaxPayload,
		TrustedProxies: cfg.TrustedProxies,
		ClientIPHeader: cfg.ClientIPHeader,
		AdminToken:     cfg.AdminToken.Reveal(),
		AdminRoutes:    admin.Routes(),
		KnownTenant:    s.Policy.KnownTenant,
		Ready: func() error {
			if !ready.Load() {
				return errors.New("starting")
			}
			if !n.Conn.IsConnected() {
				return errors.New("nats not connected")
			}
			return storageReadyErr(n)
		},
		StoreFailed: func() error { return storageReadyErr(n) },
		ReadyInfo:   readyInfo,
		Gatherer:    reg,
		Registerer:  reg,
		Logger:      log.With("component", "httpapi"),
		AccessLog:   accessLog(cfg, n, log),
	})
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	out.Server, out.Handler = srv, h
	served := make(chan struct{})
	lc.Append(uberfx.Hook{
		OnStart: func(context.Context) error {
			// A body over the NATS max payload could never be stored:
			// refuse a configured limit that does not fit rather than
			// answer 503 forever; the built-in default is lowered to fit
			// (413 beyond). Checked on start, so the NATS parts stop again.
			if body, field, explicit := cfg.LargestBody(); body+hooks.OverheadBytes > n.Conn.MaxPayload() {
				if explicit {
					return fmt.Errorf("config: %s: %d bytes plus %d bytes of headers exceed the NATS server's max_payload of %d bytes; lower it or raise max_payload",
						field, body, hooks.OverheadBytes, n.Conn.MaxPayload())
				}
				mp := n.Conn.MaxPayload()
				fit := mp - hooks.OverheadBytes
				log.Warn(fmt.Sprintf("the NATS server's max_payload of %d bytes is below the default max_body_bytes of %d plus %d bytes of headers: bodies over %d bytes get 413. "+
					"To accept the default, raise max_payload on the NATS server to at least %d (nats-server.conf: max_payload: 2MB); "+
					"to keep the lower bound, say so in --config (defaults: {source: {max_body_bytes: %d}}), which also ends this warning",
					mp, body, hooks.OverheadBytes, fit, body+hooks.OverheadBytes, fit),
					"max_payload", mp, "max_body_bytes", fit)
			}
			ln, err := net.Listen("tcp", cfg.HTTPAddr)
			if err != nil {
				return fmt.Errorf("--http-addr %s: %w", cfg.HTTPAddr, err)
			}
			addr := ln.Addr().String()
			out.Addr.Store(&addr)
			if cfg.HTTPMaxConns > 0 {
				ln = newLimitListener(ln, cfg.HTTPMaxConns)
			}
			if cfg.TLSCert != "" {
				cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
				if err != nil {
					_ = ln.Close()
					return fmt.Errorf("--tls-cert/--tls-key: %w", err)
				}
				srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
				ln = tls.NewListener(ln, srv.TLSConfig)
			}
			go func() {
				defer close(served)
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error("http server stopped", "error", err)
				}
			}()
			ready.Store(true)
			scheme := "http"
			if cfg.TLSCert != "" {
				scheme = "https"
			}
			log.Info("edge listening", "url", scheme+"://"+addr)
			switch {
			case cfg.OpenQuickstart && s.Policy.OpenToUnknown():
				log.Warn("no tenants configured: accepting any tenant and source with the defaults, unsigned; allowed on a loopback --http-addr only. List tenants in --config for anything else",
					"http_addr", addr)
			case cfg.OpenQuickstart:
				log.Info("no tenants in --config, but tenant records exist or existed: unknown tenants get 404 unknown_source (allow_unknown: true in --config accepts them)")
			}
			return nil
		},
		OnStop: func(ctx context.Context) error {
			ready.Store(false)
			err := srv.Shutdown(ctx)
			select {
			case <-served:
			case <-ctx.Done():
			}
			return err
		},
	})
	return out, nil
}

// NewLoggerTo builds the slog logger the configuration asks for, writing
// to w.
func NewLoggerTo(cfg *config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// accessLog is the access log's logger (--access-log; nil: off): log's
// handler and format, each line naming the node — the embedded NATS
// server's name in a cluster or a leaf (<host>-<cluster port>, or the
// edge's name: as in the leases' heartbeats), else the host's name.
func accessLog(cfg *config.Config, n *NATS, log *slog.Logger) *slog.Logger {
	if !cfg.AccessLog {
		return nil
	}
	node, _ := os.Hostname()
	if n.Server != nil {
		if ns := n.Server.NATS(); ns.Name() != ns.ID() {
			node = ns.Name()
		}
	}
	return log.With("node", node)
}

// localMaxKeys bounds the buckets of a node's node-local GCRA limiter (the
// Fleet's fallback, and a leaf's while it decides alone).
const localMaxKeys = 1_000_000
