package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Settle outcomes (label "outcome" of sluice_events_applied_total).
const (
	outcomeOK          = "ok"          // applied; acked
	outcomeLost        = "lost"        // protocol.ErrClaimLost; acked, not retried
	outcomeInvalid     = "invalid"     // protocol.ErrInvalid; termed
	outcomeMalformed   = "malformed"   // not JSON / unknown subject; termed
	outcomeUnavailable = "unavailable" // protocol.ErrUnavailable, protocol.ErrUnavailable; redelivered later
	outcomeError       = "error"       // any other error; redelivered later
)

// Operations (label "op").
const (
	opSettle  = "settle"
	opRelease = "release"
)

// Settler applies settle and release events: a SettleEvent published to
// Subjects.Settle commits the claim exactly like the request form (the
// partition owner's settle, durable before the ack); one published to
// Subjects.Release releases it. Every node pulls from one durable consumer on
// the work-queue stream StreamName(prefix) and acks only after the store call
// returns; the ack/term/nak rules: docs/DESIGN.md "Events". Metrics
// (WithRegisterer): sluice_events_applied_total{op,outcome}.
//
// Start and Stop have one owner; Stop waits for the consume loop and the
// handlers in flight.
type Settler struct {
	js     jetstream.JetStream
	store  claims.Store
	commit Committer
	subj   protocol.Subjects
	cfg    config
	log    *slog.Logger

	applied *prometheus.CounterVec

	consumer

	sem     chan struct{}  // one slot per handler in flight
	quit    chan struct{}  // closed by Stop
	inMu    sync.Mutex     // orders wg.Add against Stop's wg.Wait
	closing bool           // under inMu
	wg      sync.WaitGroup // handlers in flight
}

// Committer commits the pending claim a hit took, durably, at the
// tenant's partition owner: *quota.Router (Settle), the path of every
// claims.settle. Errors: protocol.ErrClaimLost, protocol.ErrInvalid,
// protocol.ErrUnavailable.
type Committer interface {
	Settle(ctx context.Context, r protocol.SettleRequest) error
}

// NewSettler returns a Settler applying prefix's settle events through
// commit and its release events to store. Options read: WithLogger,
// WithRegisterer, WithReplicas, WithStreamLimits, WithRetryDelay,
// WithMaxDeliver. Nothing touches NATS before Start.
func NewSettler(js jetstream.JetStream, store claims.Store, commit Committer, prefix string, opts ...SettlerOption) (*Settler, error) {
	if js == nil || store == nil || commit == nil {
		return nil, invalid("nil jetstream, store or committer")
	}
	subj, cfg, err := newPrefixed(prefix, opts, SettlerOption.applySettler)
	if err != nil {
		return nil, err
	}
	if cfg.streamName == "" {
		cfg.streamName = StreamName(prefix)
		if err := checkName(cfg.streamName); err != nil {
			return nil, err
		}
	}
	if cfg.durable == "" {
		cfg.durable = DefaultSettlerDurable
	}
	applied, err := counterVec(cfg.reg, "applied_total",
		"Settle/release events by operation and outcome (ok, lost, invalid, malformed, unavailable, error).",
		[]string{"op", "outcome"}, []string{opSettle, opRelease},
		[]string{outcomeOK, outcomeLost, outcomeInvalid, outcomeMalformed, outcomeUnavailable, outcomeError})
	if err != nil {
		return nil, err
	}
	log := cfg.logger.With("component", "events.settler", "stream", cfg.streamName, "consumer", cfg.durable)
	s := &Settler{
		js:       js,
		store:    store,
		commit:   commit,
		subj:     subj,
		cfg:      cfg,
		log:      log,
		applied:  applied,
		consumer: consumer{kind: "settle", name: "settler", log: log},
		sem:      make(chan struct{}, cfg.concurrency),
		quit:     make(chan struct{}),
	}
	return s, nil
}

// StreamConfig is the configuration Start gives the settle/release stream.
func (s *Settler) StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        s.cfg.streamName,
		Description: "sluice settle/release events (" + s.subj.Prefix() + ")",
		Subjects:    []string{s.subj.Settle(), s.subj.Release()},
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		Replicas:    s.cfg.replicas,
		MaxAge:      s.cfg.maxAge,
		MaxMsgs:     s.cfg.maxMsgs,
		MaxBytes:    s.cfg.maxBytes,
		MaxMsgSize:  64 << 10,
	}
}

// ConsumerConfig is the configuration Start gives the shared durable
// consumer.
func (s *Settler) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.cfg.durable,
		Description:   "sluice settlers, shared by every node",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.ackWait,
		MaxDeliver:    s.cfg.maxDeliver,
		MaxAckPending: 1000,
	}
}

// Start creates or updates the stream and the durable consumer (bounded by
// ctx) and starts consuming; the consumption itself does not use ctx and
// runs until Stop. A Settler starts at most once (else ErrStarted).
func (s *Settler) Start(ctx context.Context) error {
	return s.start(ctx, consumeSpec{
		js:     s.js,
		stream: s.cfg.streamName,
		cfg:    s.ConsumerConfig(),
		desc:   "settle consumer " + s.cfg.durable,
		prepare: func(ctx context.Context) error {
			// Retried like the consumer: every node creates the stream.
			if _, err := kvstore.EnsureStream(ctx, s.js, s.StreamConfig()); err != nil {
				return fmt.Errorf("events: settle stream %s: %w", s.cfg.streamName, kvstore.MapError(err))
			}
			return nil
		},
		handle: s.dispatch,
		pull:   2 * s.cfg.concurrency,
	})
}

// Stop stops pulling events, then waits for the consume loop and every
// handler in flight (each bounded by the call timeout). Events buffered but
// not started are redelivered after the ack wait. Safe to call more than
// once, and before Start.
func (s *Settler) Stop() {
	s.stop(func(cc jetstream.ConsumeContext) {
		close(s.quit)
		s.inMu.Lock()
		s.closing = true
		s.inMu.Unlock()
		cc.Stop()
	}, s.wg.Wait)
}

// dispatch runs on the consume loop: it waits for a free slot (backpressure
// on the loop) and applies the event on its own goroutine. Once Stop has
// begun it hands the event back at once (nak), so another node takes it
// without waiting for the ack wait.
func (s *Settler) dispatch(msg jetstream.Msg) {
	select {
	case s.sem <- struct{}{}:
	case <-s.quit:
		_ = msg.Nak()
		return
	}
	s.inMu.Lock()
	if s.closing {
		s.inMu.Unlock()
		<-s.sem
		_ = msg.Nak()
		return
	}
	s.wg.Add(1)
	s.inMu.Unlock()
	go func() {
		defer func() { <-s.sem; s.wg.Done() }()
		s.handle(msg)
	}()
}

func (s *Settler) handle(msg jetstream.Msg) {
	var op string
	switch msg.Subject() {
	case s.subj.Settle():
		op = opSettle
	case s.subj.Release():
		op = opRelease
	default:
		s.term(msg, opSettle, outcomeMalformed, fmt.Errorf("unexpected subject %q", msg.Subject()))
		return
	}
	var ev protocol.SettleEvent
	if err := json.Unmarshal(msg.Data(), &ev); err != nil {
		s.term(msg, op, outcomeMalformed, err)
		return
	}
	if err := ev.Validate(); err != nil {
		s.term(msg, op, outcomeInvalid, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.callTimeout)
	var err error
	if op == opSettle {
		err = s.commit.Settle(ctx, protocol.SettleRequest{Tenant: ev.Tenant, Source: ev.Source, Key: ev.Key, HookID: ev.HookID, Revision: ev.Revision})
	} else {
		err = s.store.Release(ctx, eventID(ev), ev.HookID, ev.Revision)
	}
	cancel()
	switch {
	case err == nil:
		s.ack(msg, op, outcomeOK)
	case errors.Is(err, protocol.ErrClaimLost):
		s.log.Debug("claim lost", "op", op, "tenant", ev.Tenant, "source", ev.Source, "hook_id", ev.HookID, "revision", ev.Revision)
		s.ack(msg, op, outcomeLost)
	case errors.Is(err, protocol.ErrInvalid):
		s.term(msg, op, outcomeInvalid, err)
	case errors.Is(err, protocol.ErrUnavailable), errors.Is(err, protocol.ErrUnavailable):
		s.nak(msg, op, outcomeUnavailable, err)
	default:
		s.nak(msg, op, outcomeError, err)
	}
}

func (s *Settler) ack(msg jetstream.Msg, op, outcome string) {
	s.applied.WithLabelValues(op, outcome).Inc()
	if err := msg.Ack(); err != nil {
		s.log.Debug("ack", "op", op, "err", err)
	}
}

func (s *Settler) term(msg jetstream.Msg, op, outcome string, cause error) {
	s.applied.WithLabelValues(op, outcome).Inc()
	s.log.Debug("event dropped", "op", op, "outcome", outcome, "err", cause)
	if err := msg.TermWithReason(outcome); err != nil {
		s.log.Debug("term", "op", op, "err", err)
	}
}

func (s *Settler) nak(msg jetstream.Msg, op, outcome string, cause error) {
	s.applied.WithLabelValues(op, outcome).Inc()
	n := uint64(1)
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 0 {
		n = md.NumDelivered
	}
	if n >= uint64(s.cfg.maxDeliver) {
		s.log.Warn("event given up after its last delivery", "op", op, "deliveries", n, "err", cause)
	} else {
		s.log.Debug("event retried later", "op", op, "deliveries", n, "err", cause)
	}
	if err := msg.NakWithDelay(s.retryDelay(n)); err != nil {
		s.log.Debug("nak", "op", op, "err", err)
	}
}

// retryDelay is retryMin * 2^(delivery-1), capped at retryMax.
func (s *Settler) retryDelay(delivery uint64) time.Duration {
	d := s.cfg.retryMin
	for i := uint64(1); i < delivery && d < s.cfg.retryMax; i++ {
		d *= 2
	}
	return min(d, s.cfg.retryMax)
}
