package quota

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/settings"
)

// protocol.ErrInvalidOption is wrapped by the error of NewRouter, NewFleet and
// owner.New when an option has an invalid argument.
var errInvalidOption = fmt.Errorf("quota: %w", protocol.ErrInvalidOption)

// routerConfig is what NewRouter reads: the shared settings and the
// Router's own.
type routerConfig struct {
	settings.Config
	budget     time.Duration
	noCoalesce bool
	reachable  func() bool
	localOwner LocalOwner
}

// fleetConfig is what NewFleet reads.
type fleetConfig struct {
	settings.Config
	members func() int
}

// Options follow docs/DESIGN.md "Options"; a bad argument makes the
// constructor fail with an error wrapping protocol.ErrInvalidOption. owner.New takes
// quota/owner's Option, which the shared options here are too: they embed
// the settings' option body, whose unexported method owner.New applies.

// RouterOption configures NewRouter.
type RouterOption interface{ applyRouter(*routerConfig) error }

// FleetOption configures NewFleet.
type FleetOption interface{ applyFleet(*fleetConfig) error }

// shared is the body of an option several constructors take; embedded,
// it makes the option one of owner.New's.
type shared = settings.Func

// applyShared applies o's body to c (a zero option does nothing).
func applyShared(o shared, c *settings.Config) error {
	if o == nil {
		return nil
	}
	return o(c)
}

// WorkerRouterOption is an option of both owner.New and NewRouter (the
// routing: prefix and partition count).
type WorkerRouterOption struct{ shared }

func (o WorkerRouterOption) applyRouter(c *routerConfig) error {
	return applyShared(o.shared, &c.Config)
}

// WorkerFleetOption is an option of both owner.New and NewFleet (the
// decisions' clock and TTLs, logging, metrics).
type WorkerFleetOption struct{ shared }

func (o WorkerFleetOption) applyFleet(c *fleetConfig) error { return applyShared(o.shared, &c.Config) }

type routerOption func(*routerConfig) error

func (o routerOption) applyRouter(c *routerConfig) error { return o(c) }

type fleetOption func(*fleetConfig) error

func (o fleetOption) applyFleet(c *fleetConfig) error { return o(c) }

func invalid(format string, args ...any) error { return settings.Invalid(format, args...) }

// WithPrefix sets the subject prefix (default "sluice"); see
// protocol.ValidatePrefix. owner.New, Router.
func WithPrefix(prefix string) WorkerRouterOption {
	return WorkerRouterOption{func(c *settings.Config) error {
		if err := protocol.ValidatePrefix(prefix); err != nil {
			return invalid("%v", err)
		}
		c.Prefix = prefix
		return nil
	}}
}

// WithPartitions sets the partition count P, 1..MaxPartitions (default 64).
// It is fixed for the fleet's life: an owner configured with another P than
// the fleet recorded refuses to start (ErrPartitionMismatch). owner.New, Router.
func WithPartitions(p int) WorkerRouterOption {
	return WorkerRouterOption{func(c *settings.Config) error {
		if p < 1 || p > MaxPartitions {
			return invalid("partitions must be 1..%d, got %d", MaxPartitions, p)
		}
		c.Partitions = p
		return nil
	}}
}

// WithBudget bounds a client call whose context has no deadline (default
// 250 ms). Router, Fleet (through its Router).
func WithBudget(d time.Duration) RouterOption {
	return routerOption(settings.Positive("budget", d, func(c *routerConfig, d time.Duration) { c.budget = d }))
}

// WithPendingTTL sets the pending TTL of a claim whose request has no
// pending_ttl_ms (default 30 s). owner.New, Fleet.
func WithPendingTTL(d time.Duration) WorkerFleetOption {
	return WorkerFleetOption{settings.Positive("pending TTL", d, func(c *settings.Config, d time.Duration) { c.PendingTTL = d })}
}

// WithClock sets the clock of the GCRA decisions and the owner's counters
// (default time.Now). Leases always use the real clock: their TTLs run on
// the server. owner.New, Fleet.
func WithClock(now func() time.Time) WorkerFleetOption {
	return WorkerFleetOption{settings.Required(now != nil, "nil clock", func(c *settings.Config) { c.Now = now })}
}

// WithCoalescing turns the client's coalescing of concurrent hits on (the
// default) or off. On, hits bound for one owner travel in one batch frame
// (see the owner protocol in wire.go); off, every hit is one JSON request.
// Settles travel in frames either way (they have no other path). Router.
func WithCoalescing(on bool) RouterOption {
	return routerOption(func(c *routerConfig) error {
		c.noCoalesce = !on
		return nil
	})
}

// LocalOwner is the partition owner of the Router's own process
// (owner.Worker; WithLocalOwner): it decides a hit for a partition it
// serves right now in process.
type LocalOwner interface {
	// HitLocal decides r (valid, of partition n) when the owner serves n
	// right now, the owner's timeout ctx's deadline, else budget: the
	// reply or the error (wrapping protocol.ErrInvalid or protocol.ErrUnavailable) of the
	// hit with done true, or done false with nothing spent, and the hit
	// takes the NATS path.
	HitLocal(ctx context.Context, r *protocol.HitRequest, n int, budget time.Duration) (rep protocol.HitReply, done bool, err error)
	// SettleLocal commits r (valid, of partition n) when the owner serves
	// n right now, as HitLocal: done true with the settle's error (nil,
	// or wrapping protocol.ErrClaimLost, protocol.ErrInvalid or
	// protocol.ErrUnavailable), or done false and the settle takes the NATS path.
	SettleLocal(ctx context.Context, r *protocol.SettleRequest, n int, budget time.Duration) (done bool, err error)
	// Routing is the owner's subject prefix and partition count.
	Routing() (prefix string, partitions int)
}

// WithLocalOwner gives the client the owner of its own process (an
// owner.Worker): a hit for a partition it serves right now is decided in
// process (quota/owner's local.go); any other takes the NATS path. The
// owner must route like the client (same prefix and partition count).
// Router.
func WithLocalOwner(o LocalOwner) RouterOption {
	return routerOption(settings.Required(o != nil, "WithLocalOwner needs an owner", func(c *routerConfig) { c.localOwner = o }))
}

// WithLogger sets the logger (default: discard). owner.New, Fleet.
func WithLogger(l *slog.Logger) WorkerFleetOption {
	return WorkerFleetOption{func(c *settings.Config) error {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.Log = l
		return nil
	}}
}

// WithRegisterer registers the metrics on r (default: none). owner.New, Fleet.
func WithRegisterer(r prometheus.Registerer) WorkerFleetOption {
	return WorkerFleetOption{func(c *settings.Config) error {
		c.Reg = r
		return nil
	}}
}

// WithMembers gives the fallback the number of live members of the fleet
// (owner.Worker.Members): while degraded, each charge's rate and burst are
// divided among them, so the fleet admits about one limit rather than one
// per member (docs/DESIGN.md "Failure semantics"); below 2, each node
// applies the whole limit. Fleet.
func WithMembers(members func() int) FleetOption {
	return fleetOption(settings.Required(members != nil, "nil member count", func(c *fleetConfig) { c.members = members }))
}

// WithReachable tells the Router whether its owners can be reached at all
// (a leaf: forward.Route). While false, a validated call fails at once
// with protocol.ErrUnavailable, so a Fleet falls back with the whole budget rather
// than after waiting out "no responders", and a service answers 503 at once.
// Router.
func WithReachable(reachable func() bool) RouterOption {
	return routerOption(settings.Required(reachable != nil, "nil reachability", func(c *routerConfig) { c.reachable = reachable }))
}
