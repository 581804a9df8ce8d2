package forward

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/promreg"
)

// Route says whether a leaf's quota calls go to its hub's partition
// owners (quota.WithReachable): while the leaf is up and the hub's fleet has
// the leaf's partition count (another count would answer every hit
// "misrouted"); else the leaf decides itself and says why (a log line,
// /readyz's "quota", sluice_edge_hub_quota). Check reads the count once per
// link-up; Reachable reads two flags and does no I/O.
type Route struct {
	linked   func() bool
	read     func(ctx context.Context) (int, error)
	want     int
	log      *slog.Logger
	gauge    prometheus.Gauge
	verified atomic.Bool // the hub's count matched since the link came up
	state    atomic.Pointer[string]
	next     time.Time // the earliest next read after a failed one (Check's goroutine only)
}

// Route states, shown in /readyz's "quota".
const (
	RouteHub      = "hub"
	RouteLinkDown = "local: the hub link is down"
	RouteChecking = "local: reading the hub's partition count"
)

// NewRoute returns the route of a leaf: linked reports whether the leaf
// connection to the hub is up, read reads the hub fleet's partition count
// (quota.FleetPartitions on the hub's leases bucket). Options:
// WithPartitions, WithLogger, WithRegisterer; a bad one is an error
// wrapping protocol.ErrInvalidOption.
func NewRoute(linked func() bool, read func(ctx context.Context) (int, error), opts ...RouteOption) (*Route, error) {
	if linked == nil || read == nil {
		return nil, fmt.Errorf("%w: nil linked or read", errInvalidOption)
	}
	cfg, err := newRouteConfig(opts)
	if err != nil {
		return nil, err
	}
	m := promreg.NewSet(cfg.reg, "edge")
	r := &Route{linked: linked, read: read, want: cfg.partitions, log: cfg.log,
		gauge: m.Gauge("hub_quota", "1 while the leaf's rate limits and quotas are decided by the hub's owners, 0 while by the leaf itself."),
	}
	if err := m.Err(); err != nil {
		return nil, fmt.Errorf("forward: %w", err)
	}
	s := RouteLinkDown
	r.state.Store(&s)
	return r, nil
}

// Reachable reports whether quota calls go to the hub's owners.
func (r *Route) Reachable() bool { return r.verified.Load() && r.linked() }

// State is the route's state (RouteHub, or why the leaf decides itself).
func (r *Route) State() string { return *r.state.Load() }

func (r *Route) set(s string, hub bool) {
	if old := r.state.Swap(&s); *old != s {
		switch {
		case hub:
			r.log.Info("quota: limits decided by the hub's owners")
		case s == RouteLinkDown || s == RouteChecking:
			r.log.Info("quota: limits decided by this leaf", "reason", s)
		default:
			r.log.Error("quota: limits decided by this leaf", "reason", s)
		}
	}
	if hub {
		r.gauge.Set(1)
	} else {
		r.gauge.Set(0)
	}
}

// Check brings the route up to date: down when the link is, else the hub's
// partition count read once per link-up (again at most once a second
// after a failed read, every 10 s after a different count).
func (r *Route) Check(ctx context.Context) {
	if !r.linked() {
		r.verified.Store(false)
		r.set(RouteLinkDown, false)
		return
	}
	if r.verified.Load() || time.Now().Before(r.next) {
		return
	}
	if r.State() == RouteLinkDown {
		r.set(RouteChecking, false)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	n, err := r.read(rctx)
	cancel()
	switch {
	case err != nil:
		r.next = time.Now().Add(time.Second)
		r.set(RouteChecking, false)
		r.log.Debug("quota: reading the hub's partition count", "error", err)
	case n != r.want:
		r.next = time.Now().Add(10 * time.Second)
		r.set("local: the hub's fleet has "+strconv.Itoa(n)+" partitions, this leaf "+strconv.Itoa(r.want)+" (set --partitions to the hub's)", false)
	default:
		r.verified.Store(true)
		r.set(RouteHub, true)
	}
}
