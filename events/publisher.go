package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/protocol"
)

// Publish outcomes (label "outcome" of sluice_events_published_total).
const (
	pubOK      = "ok"      // handed to the connection
	pubDropped = "dropped" // the queue was full, or the Publisher closed
	pubError   = "error"   // encoding or the connection refused it
)

// Publisher publishes lifecycle events on core NATS, fire-and-forget, at
// most once: its methods never block on the network and never fail. An
// event is queued (WithQueueSize) for one goroutine to hand to the
// connection; when the queue is full, the Publisher closed, or the
// connection refuses it, it is dropped, logged at debug level and counted
// in sluice_events_published_total{outcome="dropped"|"error"}.
//
// A nil *Publisher is a valid no-op. Safe for concurrent use; Close stops
// its goroutine.
type Publisher struct {
	nc      *nats.Conn
	subj    protocol.Subjects
	log     *slog.Logger
	now     func() time.Time
	q       chan outMsg
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	outcome *prometheus.CounterVec
	buf     []byte // send's, reused (run's goroutine only)
}

type outMsg struct {
	subject string
	ev      protocol.Lifecycle
}

// NewPublisher returns a Publisher of prefix's lifecycle events on nc and
// starts its sending goroutine; Close stops it. Options: WithLogger,
// WithRegisterer, WithClock, WithQueueSize. An invalid prefix or option is
// an error wrapping protocol.ErrInvalidOption; nc must not be nil.
func NewPublisher(nc *nats.Conn, prefix string, opts ...PublisherOption) (*Publisher, error) {
	if nc == nil {
		return nil, invalid("nil connection")
	}
	subj, cfg, err := newPrefixed(prefix, opts, PublisherOption.applyPublisher)
	if err != nil {
		return nil, err
	}
	logger := cfg.logger
	outcome, err := counterVec(cfg.reg, "published_total",
		"Lifecycle events by outcome: ok (handed to the NATS connection), dropped (queue full or publisher closed), error (refused by the connection).",
		[]string{"outcome"}, []string{pubOK, pubDropped, pubError})
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		nc:      nc,
		subj:    subj,
		log:     logger.With("component", "events.publisher"),
		now:     cfg.now,
		q:       make(chan outMsg, cfg.queueSize),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		outcome: outcome,
	}
	go p.run()
	return p, nil
}

// Subjects is the subject builder of the Publisher's prefix (the zero
// Subjects for a nil Publisher).
func (p *Publisher) Subjects() protocol.Subjects {
	if p == nil {
		return protocol.Subjects{}
	}
	return p.subj
}

// Close stops the sending goroutine after it has handed the queued events to
// the connection, and waits for it. Events published after Close are
// dropped. It neither flushes nor closes the connection (the caller owns
// it). Safe to call more than once and on a nil Publisher.
func (p *Publisher) Close() {
	if p == nil {
		return
	}
	p.once.Do(func() { close(p.stop) })
	<-p.done
}

// ClaimPending reports that id is now pending for hookID at rev
// ("claim.pending.<tenant>").
func (p *Publisher) ClaimPending(id claims.ID, hookID string, rev uint64) {
	p.claim(protocol.ClaimPending, id, hookID, rev)
}

// ClaimCommitted reports that id was settled (committed) for hookID; rev is
// the revision that was settled ("claim.committed.<tenant>").
func (p *Publisher) ClaimCommitted(id claims.ID, hookID string, rev uint64) {
	p.claim(protocol.ClaimCommitted, id, hookID, rev)
}

// ClaimReleased reports that hookID released id at rev
// ("claim.released.<tenant>").
func (p *Publisher) ClaimReleased(id claims.ID, hookID string, rev uint64) {
	p.claim(protocol.ClaimReleased, id, hookID, rev)
}

// ClaimExpired reports that id expired in the store ("claim.expired.<tenant>").
// hookID may be empty (the expiry marker does not carry it).
func (p *Publisher) ClaimExpired(id claims.ID, hookID string) {
	p.claim(protocol.ClaimExpired, id, hookID, 0)
}

// ClaimSplit reports that a leaf accepted id for hookID while the hub's
// side had accepted it for hubHookID ("claim.split.<tenant>"): both hooks
// are stored, the key was accepted once per side of a split.
func (p *Publisher) ClaimSplit(id claims.ID, hookID, hubHookID string) {
	if p == nil {
		return
	}
	p.enqueue(p.subj.ClaimSplit(id.Tenant), protocol.Lifecycle{
		Tenant: id.Tenant, Source: id.Source, Key: claims.NormalizeKey(id.Key), HookID: hookID,
		HubHookID: hubHookID, Reason: "accepted_on_both_sides",
	})
}

// HookStored reports that hookID was durably stored for tenant and source;
// key is its dedupe key, empty when it has none
// ("hook.stored.<tenant>.<source>").
func (p *Publisher) HookStored(tenant, source, key, hookID string) {
	if p == nil {
		return
	}
	if key != "" {
		key = claims.NormalizeKey(key)
	}
	p.enqueue(p.subj.HookStored(tenant, source), protocol.Lifecycle{Tenant: tenant, Source: source, Key: key, HookID: hookID})
}

// LimitDenied reports that a hit of tenant (for source, may be empty) was
// rate limited on the charge kind ("hooks", "bytes"), retryAfter being the
// sender's wait ("limit.denied.<tenant>").
func (p *Publisher) LimitDenied(tenant, source, kind string, retryAfter time.Duration) {
	if p == nil {
		return
	}
	ms := int64(0)
	if retryAfter > 0 {
		ms = int64((retryAfter + time.Millisecond - 1) / time.Millisecond)
	}
	p.enqueue(p.subj.LimitDenied(tenant), protocol.Lifecycle{Tenant: tenant, Source: source, Kind: kind, RetryAfterMs: ms, Reason: "rate_limited"})
}

func (p *Publisher) claim(event string, id claims.ID, hookID string, rev uint64) {
	if p == nil {
		return
	}
	p.enqueue(p.subj.Claim(event, id.Tenant), protocol.Lifecycle{
		Tenant:   id.Tenant,
		Source:   id.Source,
		Key:      claims.NormalizeKey(id.Key),
		HookID:   hookID,
		Revision: rev,
	})
}

// enqueue stamps ev and queues it without ever blocking.
func (p *Publisher) enqueue(subject string, ev protocol.Lifecycle) {
	ev.At = p.now().UTC()
	select {
	case <-p.stop:
		p.drop(subject, "closed")
		return
	default:
	}
	select {
	case p.q <- outMsg{subject: subject, ev: ev}:
	default:
		p.drop(subject, "queue full")
	}
}

func (p *Publisher) drop(subject, why string) {
	p.outcome.WithLabelValues(pubDropped).Inc()
	p.log.Debug("lifecycle event dropped", "subject", subject, "reason", why)
}

// run is the one sending goroutine: it owns every call into the connection.
func (p *Publisher) run() {
	defer close(p.done)
	for {
		select {
		case m := <-p.q:
			p.send(m)
		case <-p.stop:
			for {
				select {
				case m := <-p.q:
					p.send(m)
				default:
					return
				}
			}
		}
	}
}

func (p *Publisher) send(m outMsg) {
	data, err := appendLifecycleJSON(p.buf[:0], &m.ev)
	if err == nil {
		p.buf = data // the connection copies what it publishes
		err = p.nc.Publish(m.subject, data)
	}
	if err != nil {
		p.outcome.WithLabelValues(pubError).Inc()
		p.log.Debug("lifecycle event not published", "subject", m.subject, "err", err)
		return
	}
	p.outcome.WithLabelValues(pubOK).Inc()
}

// ObserveStore wraps inner so that every successful state change is
// published by pub: an OK Claim (or started claim) as claim.pending, a
// Settle or SettleOwn as claim.committed, a Release as claim.released.
// Results and errors of inner are unchanged; publishing never delays or
// fails a call. With a nil pub it returns inner itself.
func ObserveStore(inner claims.Store, pub *Publisher) claims.Store {
	if pub == nil {
		return inner
	}
	return &observedStore{inner: inner, pub: pub}
}

type observedStore struct {
	inner claims.Store
	pub   *Publisher
}

var _ claims.Store = (*observedStore)(nil)

// StartSettleOwn starts the inner store's settle and publishes
// claim.committed when the started settle lands, as SettleOwn does.
func (s *observedStore) StartSettleOwn(id claims.ID, hookID string, rev uint64, ttl time.Duration) (claims.StartedSettle, error) {
	c, err := s.inner.StartSettleOwn(id, hookID, rev, ttl)
	if err != nil {
		return nil, err
	}
	return observedSettle{c: c, s: s, id: id, hookID: hookID, rev: rev}, nil
}

type observedSettle struct {
	c      claims.StartedSettle
	s      *observedStore
	id     claims.ID
	hookID string
	rev    uint64
}

func (c observedSettle) Wait(ctx context.Context) (bool, error) {
	done, err := c.c.Wait(ctx)
	if done && err == nil {
		c.s.pub.ClaimCommitted(c.id, c.hookID, c.rev)
	}
	return done, err
}

// StartClaim starts the inner store's claim and publishes claim.pending
// when the started claim is taken, as Claim does.
func (s *observedStore) StartClaim(id claims.ID, hookID string, pendingTTL time.Duration) (claims.StartedClaim, error) {
	c, err := s.inner.StartClaim(id, hookID, pendingTTL)
	if err != nil {
		return nil, err
	}
	return observedClaim{c: c, s: s, id: id, hookID: hookID}, nil
}

type observedClaim struct {
	c      claims.StartedClaim
	s      *observedStore
	id     claims.ID
	hookID string
}

func (c observedClaim) Wait(ctx context.Context) (claims.Result, bool, error) {
	res, done, err := c.c.Wait(ctx)
	if done && err == nil && res.Outcome == claims.OK {
		c.s.pub.ClaimPending(c.id, c.hookID, res.Revision)
	}
	return res, done, err
}

func (s *observedStore) Claim(ctx context.Context, id claims.ID, hookID string, pendingTTL time.Duration) (claims.Result, error) {
	res, err := s.inner.Claim(ctx, id, hookID, pendingTTL)
	if err == nil && res.Outcome == claims.OK {
		s.pub.ClaimPending(id, hookID, res.Revision)
	}
	return res, err
}

func (s *observedStore) Settle(ctx context.Context, id claims.ID, hookID string, rev uint64, ttl time.Duration) error {
	err := s.inner.Settle(ctx, id, hookID, rev, ttl)
	if err == nil {
		s.pub.ClaimCommitted(id, hookID, rev)
	}
	return err
}

// SettleOwn settles through the inner store's SettleOwn and publishes
// claim.committed like Settle.
func (s *observedStore) SettleOwn(ctx context.Context, id claims.ID, hookID, digest string, rev uint64, ttl time.Duration) error {
	err := s.inner.SettleOwn(ctx, id, hookID, digest, rev, ttl)
	if err == nil {
		s.pub.ClaimCommitted(id, hookID, rev)
	}
	return err
}

func (s *observedStore) Release(ctx context.Context, id claims.ID, hookID string, rev uint64) error {
	err := s.inner.Release(ctx, id, hookID, rev)
	if err == nil {
		s.pub.ClaimReleased(id, hookID, rev)
	}
	return err
}

func (s *observedStore) Get(ctx context.Context, id claims.ID) (claims.State, error) {
	return s.inner.Get(ctx, id)
}
