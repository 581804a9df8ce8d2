package quota

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/kvstore"
)

// ErrInvalidOption is wrapped by the error of NewWorker, NewClient and
// NewFleet when an option has an invalid argument.
var ErrInvalidOption = errors.New("quota: invalid option")

// Defaults.
const (
	// DefaultBudget bounds one client call when its context has no deadline
	// (PROTOCOL.md --store-timeout).
	DefaultBudget = 250 * time.Millisecond
	// DefaultLeaseTTL is how long a partition lease (and a member heartbeat)
	// lives without renewal.
	DefaultLeaseTTL = 5 * time.Second
	// DefaultPendingTTL is the pending TTL of a claim whose request names none.
	DefaultPendingTTL = 30 * time.Second
	// DefaultCountTTL is how long a reserve/release counter lives untouched.
	DefaultCountTTL = time.Hour
	// DefaultMaxInFlight bounds a worker's concurrent KV-bound requests
	// (claims and counter operations).
	DefaultMaxInFlight = 256
)

// config collects every option; each constructor reads the fields it needs.
type config struct {
	prefix      string
	partitions  int
	budget      time.Duration
	leaseTTL    time.Duration
	memberID    string
	maxInFlight int
	pendingTTL  time.Duration
	countTTL    time.Duration
	now         func() time.Time
	noCoalesce  bool
	members     func() int
	reachable   func() bool
	localOwner  *Worker
	log         *slog.Logger
	reg         prometheus.Registerer
}

func defaults() config {
	return config{
		prefix:      kvstore.DefaultPrefix,
		partitions:  DefaultPartitions,
		budget:      DefaultBudget,
		leaseTTL:    DefaultLeaseTTL,
		maxInFlight: DefaultMaxInFlight,
		pendingTTL:  DefaultPendingTTL,
		countTTL:    DefaultCountTTL,
		now:         time.Now,
	}
}

// buildConfig applies opts (with apply, the constructor's method of them)
// to the defaults.
func buildConfig[O any](opts []O, apply func(O, *config) error) (config, error) {
	c := defaults()
	for _, o := range opts {
		if any(o) == nil {
			continue
		}
		if err := apply(o, &c); err != nil {
			return config{}, err
		}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Options follow nats.go: each constructor takes its own option type, so
// an option that does not apply to it does not compile, and an option with
// an invalid argument makes the constructor fail with an error wrapping
// ErrInvalidOption. An option that several constructors read has a type
// that is an option of each of them.

// WorkerOption configures NewWorker.
type WorkerOption interface{ applyWorker(*config) error }

// ClientOption configures NewClient.
type ClientOption interface{ applyClient(*config) error }

// FleetOption configures NewFleet.
type FleetOption interface{ applyFleet(*config) error }

// WorkerClientOption is an option of both NewWorker and NewClient (the
// routing: prefix and partition count).
type WorkerClientOption func(*config) error

func (o WorkerClientOption) applyWorker(c *config) error { return o(c) }
func (o WorkerClientOption) applyClient(c *config) error { return o(c) }

// WorkerFleetOption is an option of both NewWorker and NewFleet (the
// decisions' clock and TTLs, logging, metrics).
type WorkerFleetOption func(*config) error

func (o WorkerFleetOption) applyWorker(c *config) error { return o(c) }
func (o WorkerFleetOption) applyFleet(c *config) error  { return o(c) }

type workerOption func(*config) error

func (o workerOption) applyWorker(c *config) error { return o(c) }

type clientOption func(*config) error

type fleetOption func(*config) error

func (o fleetOption) applyFleet(c *config) error { return o(c) }

func (o clientOption) applyClient(c *config) error { return o(c) }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
}

// WithPrefix sets the subject prefix (default "sluice"); see
// kvstore.ValidatePrefix. Worker, Client.
func WithPrefix(prefix string) WorkerClientOption {
	return WorkerClientOption(func(c *config) error {
		if err := kvstore.ValidatePrefix(prefix); err != nil {
			return invalid("%v", err)
		}
		c.prefix = prefix
		return nil
	})
}

// WithPartitions sets the partition count P, 1..MaxPartitions (default 64).
// It is fixed for the fleet's life: a Worker configured with another P than
// the fleet recorded refuses to start (ErrPartitionMismatch). Worker, Client.
func WithPartitions(p int) WorkerClientOption {
	return WorkerClientOption(func(c *config) error {
		if p < 1 || p > MaxPartitions {
			return invalid("partitions must be 1..%d, got %d", MaxPartitions, p)
		}
		c.partitions = p
		return nil
	})
}

// WithBudget bounds a client call whose context has no deadline (default
// 250 ms). Client, Fleet (through its Client).
func WithBudget(d time.Duration) ClientOption {
	return clientOption(func(c *config) error {
		if d <= 0 {
			return invalid("budget must be > 0, got %v", d)
		}
		c.budget = d
		return nil
	})
}

// WithLeaseTTL sets the TTL of partition leases and member heartbeats
// (default 5 s; rounded up to whole seconds, at least 1 s). A crashed
// owner's partitions are served again about one TTL after its last renewal.
// Worker.
func WithLeaseTTL(d time.Duration) WorkerOption {
	return workerOption(func(c *config) error {
		if d <= 0 {
			return invalid("lease TTL must be > 0, got %v", d)
		}
		c.leaseTTL = kvstore.RoundTTL(d)
		return nil
	})
}

// WithMemberID names the worker in the fleet (default: a random NUID). Ids
// must be unique among running workers: a lease records its holder's id.
// Worker.
func WithMemberID(id string) WorkerOption {
	return workerOption(func(c *config) error {
		if !validMemberID(id) {
			return invalid("member id must be 1..%d bytes", maxMemberIDBytes)
		}
		c.memberID = id
		return nil
	})
}

// WithMaxInFlight bounds the requests a worker has waiting on KV at once
// (claims, counter write-through), default 256. When the bound is reached
// the partition's subscription waits: back-pressure, not failure. Worker.
func WithMaxInFlight(n int) WorkerOption {
	return workerOption(func(c *config) error {
		if n < 1 {
			return invalid("max in flight must be >= 1, got %d", n)
		}
		c.maxInFlight = n
		return nil
	})
}

// WithPendingTTL sets the pending TTL of a claim whose request has no
// pending_ttl_ms (default 30 s). Worker, Fleet.
func WithPendingTTL(d time.Duration) WorkerFleetOption {
	return WorkerFleetOption(func(c *config) error {
		if d <= 0 {
			return invalid("pending TTL must be > 0, got %v", d)
		}
		c.pendingTTL = d
		return nil
	})
}

// WithCountTTL sets the TTL of a counter whose reserve has no ttl_ms
// (default 1 h). Worker, Fleet.
func WithCountTTL(d time.Duration) WorkerFleetOption {
	return WorkerFleetOption(func(c *config) error {
		if d <= 0 {
			return invalid("count TTL must be > 0, got %v", d)
		}
		c.countTTL = d
		return nil
	})
}

// WithClock sets the clock of the GCRA decisions and the local counters
// (default time.Now). Leases always use the real clock: their TTLs run on
// the server. Worker, Fleet.
func WithClock(now func() time.Time) WorkerFleetOption {
	return WorkerFleetOption(func(c *config) error {
		if now == nil {
			return invalid("nil clock")
		}
		c.now = now
		return nil
	})
}

// WithCoalescing turns the client's coalescing of concurrent hits on (the
// default) or off. On, hits bound for one owner travel in one batch frame
// (see the owner protocol in wire.go); off, every hit is one JSON request,
// as clients before batch frames sent them. Client.
func WithCoalescing(on bool) ClientOption {
	return clientOption(func(c *config) error {
		c.noCoalesce = !on
		return nil
	})
}

// WithLocalOwner gives the client the worker of its own process: a hit for
// a partition w serves right now is decided by w in process (no encode, no
// NATS hop; the same routing, fencing and decision core as a frame, see
// local.go); any other hit, and one w stops serving meanwhile, takes the
// NATS path. w must route like the client (same prefix and partition
// count). Client.
func WithLocalOwner(w *Worker) ClientOption {
	return clientOption(func(c *config) error {
		if w == nil {
			return invalid("WithLocalOwner needs a worker")
		}
		c.localOwner = w
		return nil
	})
}

// WithLogger sets the logger (default: discard). Worker, Fleet.
func WithLogger(l *slog.Logger) WorkerFleetOption {
	return WorkerFleetOption(func(c *config) error {
		c.log = l
		return nil
	})
}

// WithRegisterer registers the metrics on r (default: none). Worker, Fleet.
func WithRegisterer(r prometheus.Registerer) WorkerFleetOption {
	return WorkerFleetOption(func(c *config) error {
		c.reg = r
		return nil
	})
}

// WithMembers gives the fallback the number of live members of the fleet
// (Worker.Members of the node's worker). While no owner answers, every
// member may be falling back at once: the fallback then divides each
// charge's rate and burst among them, so the fleet together admits about
// one limit rather than one per member (docs/DESIGN.md "Failure
// semantics"). Without it (or while it reports less than 2) the fallback
// applies the whole limit on each node. Fleet.
func WithMembers(members func() int) FleetOption {
	return fleetOption(func(c *config) error {
		if members == nil {
			return invalid("nil member count")
		}
		c.members = members
		return nil
	})
}

// WithReachable tells the Client whether its owners can be reached at all
// (an edge: whether its hub decides its limits, forward.Route). While it
// reports false, a call is not sent: it fails at once with ErrUnavailable
// (after its validation), so a Fleet answers from node-local state with
// the whole budget instead of after the owner call's share of it ran out
// on "no responders", and a service answers 503 at once. Client.
func WithReachable(reachable func() bool) ClientOption {
	return clientOption(func(c *config) error {
		if reachable == nil {
			return invalid("nil reachability")
		}
		c.reachable = reachable
		return nil
	})
}
