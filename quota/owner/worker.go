package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/lease"
	"github.com/sluice-dev/sluice/quota/internal/settings"
)

// Errors of the Worker lifecycle.
var (
	// ErrStarted is returned by Start on a worker that was started before.
	ErrStarted = errors.New("quota: worker already started")
	// ErrNotStarted is returned by Stop on a worker that was never started.
	ErrNotStarted = errors.New("quota: worker not started")
)

// queueGroup is the queue group of partition subscriptions: while a
// partition changes hands both the old and the new owner may be subscribed
// for a moment, and a request must reach only one of them.
const queueGroup = "owner"

// Worker is one member of the fleet of partition owners: it heartbeats,
// takes the leases rendezvous hashing gives it and serves each held
// partition's subject only while it holds the lease. GCRA state lives in
// its memory (lost on failover); counters are written through to the
// counts bucket before the reply (docs/DESIGN.md "Partitions, leases and
// fencing").
//
// Lifecycle: New, Start (one owned background loop), Stop (releases the
// leases, unsubscribes, waits for requests in flight). A worker cannot be
// restarted. Safe for concurrent use.
type Worker struct {
	cfg    settings.Config
	nc     *nats.Conn
	counts *kvstore.Bucket
	// store's StartClaim and StartSettleOwn pipeline a frame's claim and
	// settle writes (serve_frame.go startClaims, settle.go startSettles).
	store  claims.Store
	grants *grants // the claims granted to frame hits, for their settles
	id     string
	log    *slog.Logger
	met    *workerMetrics
	sem    chan struct{}
	leases *lease.Loop // the lease loop; it reports to leaseOwner

	// served[n] is the tenure serving partition n (nil: none), for batch
	// frames that reach the worker on any of its subjects.
	served []atomic.Pointer[tenure]
	// route is the subject of the worker's own subscription (batch frames
	// for any partition it serves); replies advertise it to clients.
	route    string
	routeSub *nats.Subscription

	inflight tracker // every request goroutine
	runners  runners // goroutines of KV-bound requests

	stopCh chan struct{}
	done   chan struct{}

	mu       sync.Mutex // guards started, stopped, snapshot
	started  bool
	stopped  bool
	snapshot []int // sorted partitions held, for Partitions

	// Owned by the lease loop's goroutine (leaseOwner's callbacks).
	tenures map[int]*tenure
	retired []*tenure // lost tenures whose requests may still be in flight
	stopErr error
}

// New returns a worker serving quota partitions over nc, with leases and
// heartbeats in the leases bucket, counters in the counts bucket (both from
// quota.OpenBuckets) and dedupe claims in store. Errors wrap
// protocol.ErrInvalidOption.
func New(nc *nats.Conn, leases, counts *kvstore.Bucket, store claims.Store, opts ...Option) (*Worker, error) {
	if nc == nil || leases == nil || counts == nil || store == nil {
		return nil, settings.Invalid("owner.New needs a connection, both buckets and a claims store")
	}
	cfg := defaults()
	if err := settings.Apply(&cfg, opts); err != nil {
		return nil, err
	}
	if cfg.Shards > 1 && cfg.Partitions%cfg.Shards != 0 {
		return nil, settings.Invalid("%d shards do not divide %d partitions", cfg.Shards, cfg.Partitions)
	}
	id := cfg.MemberID
	if id == "" {
		id = nuid.Next()
	}
	met, err := newWorkerMetrics(cfg.Reg)
	if err != nil {
		return nil, fmt.Errorf("quota: metrics: %w", err)
	}
	w := &Worker{
		cfg:     cfg,
		nc:      nc,
		counts:  counts,
		store:   store,
		id:      id,
		log:     cfg.Log.With("member", id),
		met:     met,
		sem:     make(chan struct{}, cfg.MaxInFlight),
		stopCh:  make(chan struct{}),
		done:    make(chan struct{}),
		tenures: make(map[int]*tenure),
		served:  make([]atomic.Pointer[tenure], cfg.Partitions),
		route:   quota.MemberSubject(cfg.Prefix, id),
		runners: newRunners(),
		grants:  newGrants(),
	}
	w.leases = lease.New(lease.Config{
		Bucket: leases, Conn: nc, ID: id, Partitions: cfg.Partitions, Shards: cfg.Shards, TTL: cfg.LeaseTTL, Log: w.log,
	}, leaseOwner{w})
	return w, nil
}

// ID is the worker's member id.
func (w *Worker) ID() string { return w.id }

// Members is the number of live members of the fleet as this worker sees
// them (itself included; 0 before it has seen the leases bucket): what a
// quota.Fleet on the same node divides its fallback limits by (quota.WithMembers).
func (w *Worker) Members() int { return w.leases.Members() }

// Partitions returns the partitions the worker serves now, ascending.
func (w *Worker) Partitions() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.snapshot)
}

// Start checks (or records, for the first worker) the fleet's partition
// count, heartbeats, and starts the lease loop. Errors:
// quota.ErrPartitionMismatch, ErrStarted. ctx bounds the start-up calls only.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrStarted
	}
	w.started = true
	w.mu.Unlock()

	if err := w.leases.Start(ctx); err != nil {
		w.leases.Close()
		close(w.done)
		return err
	}
	sub, err := w.nc.QueueSubscribe(w.route, queueGroup, w.serveFrame)
	if err != nil {
		w.leases.Close()
		close(w.done)
		return fmt.Errorf("quota: subscribe %s: %w", w.route, err)
	}
	w.routeSub = sub
	w.log.Info("quota worker started", "partitions", w.cfg.Partitions, "lease_ttl", w.cfg.LeaseTTL)
	go w.run()
	return nil
}

// Stop releases every lease (so peers take over at once), unsubscribes,
// waits for requests in flight and removes the heartbeat. When ctx ends
// first Stop returns its error and the shutdown completes in the
// background. Calling Stop again waits again.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		w.mu.Unlock()
		return ErrNotStarted
	}
	if !w.stopped {
		w.stopped = true
		close(w.stopCh)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return w.stopErr
	case <-ctx.Done():
		return fmt.Errorf("quota: stop: %w", ctx.Err())
	}
}
