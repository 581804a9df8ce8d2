// Package service is the sluice NATS micro service ("sluice", discoverable
// with $SRV.PING|INFO|STATS): the request/reply interface of PROTOCOL.md
// ("NATS") for services in any language, its endpoints, bounds and errors
// as stated there. Bodies are decoded strictly (decodeStrict), then
// validated by protocol's Validate methods.
//
// Every request runs in its own goroutine, under a deadline counted from
// its arrival, bounded by a semaphore: a slow partition owner or KV write
// holds up only the requests waiting on it. Service.Stop stops taking
// requests and waits for those in flight.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/tracing"
)

// Name is the micro service name ($SRV.PING.sluice …).
const Name = "sluice"

// Version is the service version reported by $SRV.INFO (SemVer, as micro
// requires). Set it at build time with
// -ldflags "-X github.com/sluice-dev/sluice/service.Version=1.2.3";
// Config.Version overrides it.
var Version = "0.1.0"

// Defaults of a Config.
const (
	// DefaultMaxInFlight bounds the requests handled at once.
	DefaultMaxInFlight = 1024
)

// flushTimeout bounds New's wait for the server to confirm the endpoints'
// subscriptions.
const flushTimeout = 2 * time.Second

// Error replies carry an error of the contract (protocol.Errors) as the
// Nats-Service-Error header, and its NATS status as Nats-Service-Error-Code;
// a 400's reason is protocol.InvalidRequest's code, ": " and what is wrong.

// ErrInvalidConfig is returned by New for an unusable Config.
var ErrInvalidConfig = errors.New("service: invalid config")

// Config configures a Service. Every dependency is optional — a nil one
// leaves its endpoints unregistered (callers get no responders), so one
// process can serve some endpoints and another the rest — but at least one
// must be given.
type Config struct {
	// Prefix is the subject prefix (default "sluice"); it must pass
	// protocol.ValidatePrefix.
	Prefix string
	// Partitions is the fleet's quota partition count, reported in the
	// $SRV.INFO metadata, 1..quota.MaxPartitions. Default: the Quota's
	// Partitions() when it has that method (quota.Router does; a different
	// non-zero value is an error), else protocol.DefaultPartitions.
	Partitions int
	// Version overrides the package Version (must be SemVer).
	Version string
	// QueueGroup of every endpoint (default micro's "q"): the nodes of a
	// fleet share the requests.
	QueueGroup string

	// Quota serves quota.* and claims.settle (the partition owner's
	// settle: quota.Router.Settle).
	Quota Quota
	// Claims serves claims.release and claims.get (the fleet store,
	// claims.NewKV).
	Claims claims.Store
	// Replay serves replay.claim (claims.NewKVReplay).
	Replay claims.ReplayStore
	// Cooldown serves cooldown.* (cooldown.New).
	Cooldown Cooldown
	// Events, when set, receives every quota.hit the service answers
	// rate_limited (limit.denied.<tenant>).
	Events Events
	// Sync is the durability barrier (nil: none, the JetStream ack is the
	// promise): a settle's {"ok":true} and a replay claim's "claimed" are
	// sent only after it returned nil; its failure is 503
	// store_unavailable. A pending claim (quota.hit) is not synced: no
	// caller's 2xx rests on it before its settle.
	Sync durability.Syncer

	// StoreTimeout bounds every request from its arrival (default 250 ms),
	// except settle and release of claims.
	StoreTimeout time.Duration
	// SettleTimeout bounds claims.settle and claims.release (default 1 s,
	// never less than StoreTimeout).
	SettleTimeout time.Duration
	// MaxInFlight bounds the requests handled at once (default 1024). A
	// request that finds no free slot before its deadline is answered 503.
	MaxInFlight int

	// Tracer, when set, traces every request with a server span named
	// after the endpoint's subject, a child of the request's traceparent
	// header when it carries one (nil: tracing off, at no cost).
	Tracer trace.Tracer

	// Logger receives 500s at error level and other failures at debug
	// level (nil: discard).
	Logger *slog.Logger
	// Registerer, when set, receives the service's metrics:
	// sluice_service_requests_total{endpoint,outcome},
	// sluice_service_request_duration_seconds{endpoint} and
	// sluice_service_requests_in_flight.
	Registerer prometheus.Registerer
}

// withDefaults fills the zero fields of c and validates it.
func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = protocol.DefaultPrefix
	}
	if err := protocol.ValidatePrefix(c.Prefix); err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if pq, ok := c.Quota.(interface{ Partitions() int }); ok {
		switch p := pq.Partitions(); {
		case c.Partitions == 0:
			c.Partitions = p
		case c.Partitions != p:
			return c, fmt.Errorf("%w: partitions %d, but the quota Router routes with %d", ErrInvalidConfig, c.Partitions, p)
		}
	}
	if c.Partitions == 0 {
		c.Partitions = protocol.DefaultPartitions
	}
	if c.Partitions < 1 || c.Partitions > quota.MaxPartitions {
		return c, fmt.Errorf("%w: partitions must be 1..%d, got %d", ErrInvalidConfig, quota.MaxPartitions, c.Partitions)
	}
	if c.Version == "" {
		c.Version = Version
	}
	if c.StoreTimeout < 0 || c.SettleTimeout < 0 || c.MaxInFlight < 0 {
		return c, fmt.Errorf("%w: negative timeout, ttl or max in flight", ErrInvalidConfig)
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = protocol.DefaultTimeout
	}
	if c.SettleTimeout == 0 {
		c.SettleTimeout = protocol.DefaultSettleTimeout
	}
	c.SettleTimeout = max(c.SettleTimeout, c.StoreTimeout)
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Quota == nil && c.Claims == nil && c.Replay == nil && c.Cooldown == nil {
		return c, fmt.Errorf("%w: no dependency given, nothing to serve", ErrInvalidConfig)
	}
	return c, nil
}

// Service is a running sluice micro service. Its methods are safe for
// concurrent use.
type Service struct {
	cfg     Config
	nc      *nats.Conn
	svc     micro.Service
	log     *slog.Logger
	metrics *metrics
	sem     chan struct{}
	eps     map[string]*endpoint // by micro endpoint name

	mu      sync.RWMutex // guards stopped against wg.Add
	stopped bool
	wg      sync.WaitGroup

	stopOnce sync.Once
	stopErr  error
}

// New registers the sluice micro service on nc with the endpoints of the
// dependencies cfg provides, and starts serving; it returns once the server
// has confirmed the subscriptions (or after 2 s when the connection is
// down). Stop it with Stop.
// Errors: ErrInvalidConfig, or micro's registration error.
func New(nc *nats.Conn, cfg Config) (*Service, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg:     cfg,
		nc:      nc,
		log:     cfg.Logger.With("component", "service", "prefix", cfg.Prefix),
		metrics: m,
		sem:     make(chan struct{}, cfg.MaxInFlight),
		eps:     map[string]*endpoint{},
	}
	eps := s.endpoints()
	for _, ep := range eps { // complete before STATS can ask
		s.eps[ep.name] = ep
		// Exported at zero from the start: each endpoint's answers.
		m.requests.WithLabelValues(ep.subject, outcomeOK)
		m.duration.WithLabelValues(ep.subject)
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        Name,
		Version:     cfg.Version,
		Description: "sluice: fleet-wide rate limits, quotas, dedupe claims, replay nonces and cooldowns",
		Metadata: map[string]string{
			"partitions": strconv.Itoa(cfg.Partitions),
			"version":    cfg.Version,
			"prefix":     cfg.Prefix,
		},
		QueueGroup:   cfg.QueueGroup,
		StatsHandler: s.endpointStats,
	})
	if err != nil {
		return nil, fmt.Errorf("service: add micro service: %w", err)
	}
	s.svc = svc
	for _, ep := range eps {
		if err := svc.AddEndpoint(ep.name, micro.HandlerFunc(s.dispatch(ep)),
			micro.WithEndpointSubject(ep.subject)); err != nil {
			_ = s.Stop() // endpoints added so far may have requests in flight
			return nil, fmt.Errorf("service: add endpoint %s: %w", ep.subject, err)
		}
	}
	// Return once the server has the subscriptions, so a request sent right
	// after New finds a responder. A connection that is down re-sends them
	// when it reconnects: not an error.
	if err := nc.FlushTimeout(flushTimeout); err != nil {
		s.log.Warn("subscriptions not confirmed by the server yet", "error", err)
	}
	return s, nil
}

// Subjects lists the subjects the service answers on, in registration
// order.
func (s *Service) Subjects() []string {
	var out []string
	for _, e := range s.svc.Info().Endpoints {
		out = append(out, e.Subject)
	}
	return out
}

// Info is micro's description of the service (what $SRV.INFO answers).
func (s *Service) Info() micro.Info { return s.svc.Info() }

// Stop unsubscribes every endpoint, answers requests that still arrive 503
// "service_stopping", and waits for the requests in flight (each bounded by
// its deadline) to be answered. Safe to call more than once; later calls
// return the first call's error.
func (s *Service) Stop() error {
	s.stopOnce.Do(func() {
		s.stopErr = s.svc.Stop()
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s.stopErr
}

// endpoint is one request subject and its handler. handle decodes,
// validates and serves one request body, returning the reply value or an
// error that reply() maps to a status.
type endpoint struct {
	name    string // micro endpoint name: [A-Za-z0-9_-]
	subject string
	timeout time.Duration
	handle  func(ctx context.Context, data []byte) (any, error)
	// scope, on a tenant-scoped subject, refuses a body acting for a
	// tenant other than the subject's (nil: unscoped).
	scope func(subject string, data []byte) error

	inFlight  atomic.Int64
	statsMu   sync.Mutex
	numErrors int
	lastError string
}

// dispatch is micro's handler of ep. It runs on the endpoint's subscription
// goroutine, so it only takes a slot and hands the request to a goroutine.
// The reply is published on the connection directly, not with
// micro.Request.Respond, which reads the response state after the handler
// returns and would race with a later reply (so micro's own num_errors
// stays 0; STATS "data" carries the service's counts).
func (s *Service) dispatch(ep *endpoint) func(micro.Request) {
	return func(req micro.Request) {
		start := time.Now()
		reply, data, subject := req.Reply(), req.Data(), req.Subject()
		s.mu.RLock()
		if s.stopped {
			s.mu.RUnlock()
			s.finish(ep, reply, start, nil, errStopping)
			return
		}
		s.wg.Add(1)
		s.mu.RUnlock()

		ctx, cancel := context.WithTimeout(context.Background(), ep.timeout)
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			cancel()
			s.finish(ep, reply, start, nil, fmt.Errorf("%w: no free slot within %v: %w", errBusy, ep.timeout, ctx.Err()))
			s.wg.Done()
			return
		}
		s.metrics.inFlight.Inc()
		ep.inFlight.Add(1)
		var span trace.Span
		if s.cfg.Tracer != nil {
			ctx, span = s.startSpan(ctx, ep, subject, req.Headers())
		}
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			defer s.metrics.inFlight.Dec()
			defer ep.inFlight.Add(-1)
			defer cancel()
			v, err := s.serve(ctx, ep, subject, data)
			s.finish(ep, reply, start, v, err)
			if span != nil {
				endSpan(span, err)
			}
		}()
	}
}

// startSpan starts the server span of a request to ep on subject, a
// child of the trace context its headers carry.
func (s *Service) startSpan(ctx context.Context, ep *endpoint, subject string, h micro.Headers) (context.Context, trace.Span) {
	ctx = tracing.Extract(ctx, nats.Header(h))
	return s.cfg.Tracer.Start(ctx, ep.subject, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("messaging.destination.name", subject)))
}

// endSpan ends a request's span, marked failed with the error's code
// when it failed.
func endSpan(span trace.Span, err error) {
	if err != nil {
		code, reason, _ := classify(err)
		span.SetStatus(codes.Error, code+" "+reason)
	}
	span.End()
}

// serve runs ep's handler, turning a panic into an error.
func (s *Service) serve(ctx context.Context, ep *endpoint, subject string, data []byte) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	if ep.scope != nil {
		if err := ep.scope(subject, data); err != nil {
			return nil, err
		}
	}
	return ep.handle(ctx, data)
}

// finish answers the request (when it has a reply subject), counts it and
// logs failures.
func (s *Service) finish(ep *endpoint, reply string, start time.Time, v any, err error) {
	var msg *nats.Msg
	out := outcomeOK
	if err != nil {
		var code, reason string
		code, reason, out = classify(err)
		switch out {
		case outcomeError:
			s.log.Error("request failed", "subject", ep.subject, "error", err)
		default:
			s.log.Debug("request refused", "subject", ep.subject, "code", code, "error", err)
		}
		ep.noteError(code + ":" + reason)
		msg = &nats.Msg{Header: nats.Header{}}
		msg.Header.Set(micro.ErrorCodeHeader, code)
		msg.Header.Set(micro.ErrorHeader, reason)
	} else {
		body, merr := marshalReply(v)
		if merr != nil {
			s.finish(ep, reply, start, nil, merr)
			return
		}
		msg = &nats.Msg{Data: body}
	}
	s.metrics.observe(ep.subject, out, time.Since(start))
	if reply == "" {
		return // published without a reply subject: nobody to answer
	}
	msg.Subject = reply
	if perr := s.nc.PublishMsg(msg); perr != nil {
		s.log.Debug("reply not sent", "subject", ep.subject, "error", perr)
	}
}

func (ep *endpoint) noteError(e string) {
	ep.statsMu.Lock()
	ep.numErrors++
	ep.lastError = e
	ep.statsMu.Unlock()
}

// EndpointStats is the "data" of each endpoint in $SRV.STATS: the errors
// the service answered (micro's own num_errors does not see them, see
// Service) and the requests it is handling now.
type EndpointStats struct {
	NumErrors int    `json:"num_errors"`
	LastError string `json:"last_error,omitempty"`
	InFlight  int64  `json:"in_flight"`
}

func (s *Service) endpointStats(e *micro.Endpoint) any {
	ep, ok := s.eps[e.Name]
	if !ok {
		return nil
	}
	ep.statsMu.Lock()
	defer ep.statsMu.Unlock()
	return EndpointStats{NumErrors: ep.numErrors, LastError: ep.lastError, InFlight: ep.inFlight.Load()}
}
