package events

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/internal/promreg"
	"github.com/sluice-dev/sluice/protocol"
)

// protocol.ErrInvalidOption is wrapped by every error an Option or a constructor
// returns for a bad argument (an invalid prefix, a negative limit …).
var errInvalidOption = fmt.Errorf("events: %w", protocol.ErrInvalidOption)

// ErrStarted is returned by Start when the component was already started
// (or stopped: a component runs at most once).
var ErrStarted = errors.New("events: already started")

// Defaults.
const (
	// DefaultStreamMaxAge bounds how long an unapplied settle/release event
	// is kept. A pending claim lives far shorter (30 s by default), so an
	// older event could only be lost anyway.
	DefaultStreamMaxAge = 24 * time.Hour
	// DefaultStreamMaxMsgs bounds the number of unapplied events kept.
	DefaultStreamMaxMsgs = 1_000_000
	// DefaultStreamMaxBytes bounds the bytes of unapplied events kept (1 GiB).
	DefaultStreamMaxBytes = 1 << 30
	// DefaultSettlerDurable names the settlers' shared durable consumer.
	DefaultSettlerDurable = "settler"
	// DefaultExpiryDurable names the expiry watchers' shared durable
	// consumer on the claims bucket's stream.
	DefaultExpiryDurable = "sluice_events_expiry"
	// DefaultCallTimeout is the budget of one claims.Store call made by the
	// Settler for one event.
	DefaultCallTimeout = 5 * time.Second
	// DefaultConcurrency is how many events one Settler applies at once.
	DefaultConcurrency = 16
	// DefaultQueueSize is how many lifecycle events a Publisher buffers
	// before it drops new ones.
	DefaultQueueSize = 8192
)

// config holds every option; each constructor reads the fields it uses.
type config struct {
	logger      *slog.Logger
	reg         prometheus.Registerer
	now         func() time.Time
	replicas    int
	maxAge      time.Duration
	maxMsgs     int64
	maxBytes    int64
	durable     string
	callTimeout time.Duration
	concurrency int
	retryMin    time.Duration
	retryMax    time.Duration
	queueSize   int
	streamName  string
	maxDeliver  int
	ackWait     time.Duration
}

func defaults() config {
	return config{
		logger:      slog.New(slog.DiscardHandler),
		now:         time.Now,
		replicas:    1,
		maxAge:      DefaultStreamMaxAge,
		maxMsgs:     DefaultStreamMaxMsgs,
		maxBytes:    DefaultStreamMaxBytes,
		callTimeout: DefaultCallTimeout,
		concurrency: DefaultConcurrency,
		retryMin:    time.Second,
		retryMax:    30 * time.Second,
		queueSize:   DefaultQueueSize,
		maxDeliver:  10,
		ackWait:     30 * time.Second,
	}
}

// newPrefixed is the start of a constructor of prefix's components: the
// prefix's Subjects (an invalid prefix is an error wrapping
// protocol.ErrInvalidOption) and the config of opts (see newConfig).
func newPrefixed[O any](prefix string, opts []O, apply func(O, *config) error) (protocol.Subjects, config, error) {
	if err := protocol.ValidatePrefix(prefix); err != nil {
		return protocol.Subjects{}, config{}, fmt.Errorf("%w: %w", errInvalidOption, err)
	}
	subj, _ := protocol.NewSubjects(prefix) // a valid prefix: no error
	cfg, err := newConfig(opts, apply)
	return subj, cfg, err
}

// newConfig applies opts with apply, the constructor's method of them, to
// the defaults.
func newConfig[O any](opts []O, apply func(O, *config) error) (config, error) {
	c := defaults()
	err := option.Apply(&c, opts, apply)
	return c, err
}

// Options follow docs/DESIGN.md "Options"; a bad value makes the
// constructor fail with an error wrapping protocol.ErrInvalidOption.

// PublisherOption configures NewPublisher.
type PublisherOption interface{ applyPublisher(*config) error }

// SettlerOption configures NewSettler.
type SettlerOption interface{ applySettler(*config) error }

// ExpiryOption configures NewExpiryWatcher.
type ExpiryOption interface{ applyExpiry(*config) error }

// CommonOption is an option of every constructor (logging, metrics).
type CommonOption func(*config) error

func (o CommonOption) applyPublisher(c *config) error { return o(c) }
func (o CommonOption) applySettler(c *config) error   { return o(c) }
func (o CommonOption) applyExpiry(c *config) error    { return o(c) }

type publisherOption func(*config) error

func (o publisherOption) applyPublisher(c *config) error { return o(c) }

type settlerOption func(*config) error

func (o settlerOption) applySettler(c *config) error { return o(c) }

func invalid(format string, a ...any) error {
	return option.Invalid(errInvalidOption, format, a...)
}

// count is the option setting the count field(c) to n, which must be > 0
// (else an error wrapping protocol.ErrInvalidOption, naming what).
func count(what string, n int, field func(*config) *int) func(*config) error {
	return option.Positive(errInvalidOption, what, n, func(c *config, n int) { *field(c) = n })
}

// WithLogger sets the logger (all components; nil: discard).
func WithLogger(l *slog.Logger) CommonOption {
	return func(c *config) error {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.logger = l
		return nil
	}
}

// WithRegisterer registers the component's metrics on reg (all components;
// nil, the default: metrics are kept but not exported). Components sharing
// a registerer share their counters.
func WithRegisterer(reg prometheus.Registerer) CommonOption {
	return func(c *config) error { c.reg = reg; return nil }
}

// WithClock sets the clock that stamps Lifecycle.At (Publisher; default
// time.Now).
func WithClock(now func() time.Time) PublisherOption {
	return publisherOption(option.Clock(now, errInvalidOption, func(c *config) *func() time.Time { return &c.now }))
}

// WithQueueSize bounds the Publisher's buffer of events not yet handed to
// the connection (default DefaultQueueSize). Beyond it events are dropped
// and counted, never waited for.
func WithQueueSize(n int) PublisherOption {
	return publisherOption(count("queue size", n, func(c *config) *int { return &c.queueSize }))
}

// WithReplicas sets the replica count of the settle/release stream
// (Settler; default 1, 3 in a cluster).
func WithReplicas(n int) SettlerOption {
	return settlerOption(func(c *config) error {
		if n < 1 || n > 5 {
			return invalid("replicas %d not in 1..5", n)
		}
		c.replicas = n
		return nil
	})
}

// StreamBytesFor is the byte limit of the settle/release stream on a
// JetStream store of maxStore bytes (<= 0: unknown or unlimited):
// DefaultStreamMaxBytes, or an eighth of the store when less, since a file
// stream's byte limit is reserved from the store when it is created.
func StreamBytesFor(maxStore int64) int64 {
	if maxStore <= 0 {
		return DefaultStreamMaxBytes
	}
	return max(1, min(DefaultStreamMaxBytes, maxStore/8))
}

// WithStreamLimits bounds the settle/release stream (Settler): how old,
// how many and how many bytes of unapplied events it keeps. The oldest go
// first. Each must be > 0; defaults DefaultStreamMaxAge,
// DefaultStreamMaxMsgs and DefaultStreamMaxBytes.
func WithStreamLimits(maxAge time.Duration, maxMsgs, maxBytes int64) SettlerOption {
	return settlerOption(func(c *config) error {
		if maxAge <= 0 || maxMsgs <= 0 || maxBytes <= 0 {
			return invalid("stream limits must be > 0 (max age %s, max msgs %d, max bytes %d)", maxAge, maxMsgs, maxBytes)
		}
		c.maxAge, c.maxMsgs, c.maxBytes = maxAge, maxMsgs, maxBytes
		return nil
	})
}

// WithRetryDelay sets the redelivery delay of an event whose store was
// unavailable (Settler): lo doubled per delivery attempt, capped at hi
// (defaults 1 s and 30 s).
func WithRetryDelay(lo, hi time.Duration) SettlerOption {
	return settlerOption(func(c *config) error {
		if lo <= 0 || hi < lo {
			return invalid("retry delay min %s, max %s", lo, hi)
		}
		c.retryMin, c.retryMax = lo, hi
		return nil
	})
}

// WithMaxDeliver bounds the delivery attempts of one settle/release event
// (Settler; default 10). After the last, the event is dropped and counted.
func WithMaxDeliver(n int) SettlerOption {
	return settlerOption(count("max deliver", n, func(c *config) *int { return &c.maxDeliver }))
}

// checkName validates a stream or consumer name: 1..64 bytes, no '.', '*',
// '>', path separators or whitespace.
func checkName(name string) error {
	if name == "" || len(name) > 64 {
		return invalid("name %q must be 1..64 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		switch b := name[i]; {
		case b == '.' || b == '*' || b == '>' || b == '/' || b == '\\' || b <= ' ' || b >= 0x7f:
			return invalid("name %q: byte %q not allowed", name, b)
		}
	}
	return nil
}

// counterVec is the counter vector sluice_events_<name> with labels,
// registered on reg by promreg's policy (an equal collector is shared),
// with every combination of values created at zero so that it is exported
// before its first count.
func counterVec(reg prometheus.Registerer, name, help string, labels []string, values ...[]string) (*prometheus.CounterVec, error) {
	set := promreg.NewSet(reg, "events")
	c := set.CounterVec(name, help, labels...)
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	promreg.Zero(c, values...)
	return c, nil
}
