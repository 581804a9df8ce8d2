package events

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
)

// Expiry outcomes (label "outcome" of sluice_events_expiry_messages_total).
const (
	expExpired     = "expired"     // a MaxAge marker, reported
	expOther       = "other"       // a value, a purge/delete marker: ignored
	expUndecodable = "undecodable" // a marker under a key that is not a claim
	expDuplicate   = "duplicate"   // a marker this node reported already
)

// recentSeqs is how many reported marker sequences a watcher remembers to
// never report one twice.
const recentSeqs = 4096

// ExpiryWatcher reports claim expiry: it publishes claim.expired.<tenant>
// (Publisher.ClaimExpired, without hook id) for every expiry marker the
// server writes into the claims bucket when a claim's TTL runs out. The
// edge runs it only with --claim-expiry-events, which is also what gives
// the claims bucket its markers (claims.BucketConfig).
//
// How: a KV watcher only shows an expiry as a purge, like an explicit
// release, so the watcher reads the bucket's stream KV_<bucket> directly,
// through a durable pull consumer filtered on "$KV.<bucket>.>", HeadersOnly
// (no values are sent), and keeps only the messages whose header
// Nats-Marker-Reason is "MaxAge". A release (kv purge) carries
// KV-Operation: PURGE and no marker reason; the server never writes a MaxAge
// marker for an expiring purge marker, so a released claim never reports
// expired.
//
// Once fleet-wide: every node's watcher pulls from ONE durable consumer
// (DefaultExpiryDurable; DeliverPolicy New when the
// consumer is first created, AckNone), so the server hands each marker to
// exactly one node and no node sees a message twice; a node additionally
// remembers the last recentSeqs reported sequences. Being durable, the
// consumer keeps its position across reconnects and restarts, and nats.go
// resumes pulling after a reconnect. Expiry events are at most once: a node
// that dies loses the markers it had pulled but not yet published, and a
// marker that the consumer reaches after it is gone (markers live the
// bucket's LimitMarkerTTL, 1 s by default) is never seen; lag beyond that
// (no watcher running, a backlog) loses reports. AckNone is chosen because
// acks could not buy more: a redelivery after the ack wait would find the
// marker gone.
//
// A marker does not say what expired: a committed claim reaching its dedupe
// TTL (72 h by default) is reported expired too, like a pending claim whose
// holder never settled it. The payload's hook_id is empty (the value is gone).
//
// Cost: every write to the claims bucket (create, settle, release, marker)
// passes through this consumer as one headers-only message (about 100-200
// bytes) to one node of the fleet, i.e. about three or four messages per
// claim's life, with no acks. Metrics: sluice_events_expiry_messages_total
// {outcome="expired"|"other"|"undecodable"|"duplicate"} counts them all.
//
// Start and Stop have one owner; Stop waits for the consume loop.
type ExpiryWatcher struct {
	js     jetstream.JetStream
	bucket string
	prefix string // "$KV.<bucket>."
	pub    *Publisher
	cfg    config
	log    *slog.Logger
	seen   *prometheus.CounterVec

	consumer

	// Only the consume loop touches these.
	ring []uint64
	next int
	set  map[uint64]struct{}
}

// NewExpiryWatcher returns a watcher of the claims bucket named bucket
// (kvstore.BucketNames(prefix).Claims) reporting through pub, which must not
// be nil (a watcher that cannot report would still take its share of the
// fleet's markers). Options read: WithLogger, WithRegisterer. Nothing
// touches NATS before Start.
func NewExpiryWatcher(js jetstream.JetStream, bucket string, pub *Publisher, opts ...ExpiryOption) (*ExpiryWatcher, error) {
	if js == nil || pub == nil {
		return nil, invalid("nil jetstream or publisher")
	}
	if err := checkName(bucket); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts, ExpiryOption.applyExpiry)
	if err != nil {
		return nil, err
	}
	if cfg.durable == "" {
		cfg.durable = DefaultExpiryDurable
	}
	seen, err := counterVec(cfg.reg, "expiry_messages_total",
		"Claims bucket messages seen by the expiry watcher, by outcome (expired, other, undecodable, duplicate).",
		[]string{"outcome"}, []string{expExpired, expOther, expUndecodable, expDuplicate})
	if err != nil {
		return nil, err
	}
	log := cfg.logger.With("component", "events.expiry", "bucket", bucket, "consumer", cfg.durable)
	w := &ExpiryWatcher{
		js:       js,
		bucket:   bucket,
		prefix:   kvstore.SubjectPrefix(bucket),
		pub:      pub,
		cfg:      cfg,
		log:      log,
		seen:     seen,
		consumer: consumer{kind: "expiry", name: "expiry watcher", log: log},
		ring:     make([]uint64, recentSeqs),
		set:      make(map[uint64]struct{}, recentSeqs),
	}
	return w, nil
}

// ConsumerConfig is the configuration Start gives the shared durable
// consumer on KV_<bucket>.
func (w *ExpiryWatcher) ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       w.cfg.durable,
		Description:   "sluice claim expiry reporting, shared by every node",
		FilterSubject: w.prefix + ">",
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckNonePolicy,
		HeadersOnly:   true,
	}
}

// Start creates the durable consumer if it does not exist (or updates it),
// bounded by ctx, and starts consuming until Stop; the bucket must exist.
// A watcher starts at most once (else ErrStarted).
func (w *ExpiryWatcher) Start(ctx context.Context) error {
	stream := kvstore.StreamName(w.bucket)
	return w.start(ctx, consumeSpec{
		js:     w.js,
		stream: stream,
		cfg:    w.ConsumerConfig(),
		desc:   fmt.Sprintf("expiry consumer %s on %s", w.cfg.durable, stream),
		handle: w.handle,
		pull:   256,
	})
}

// Stop stops pulling, reports the markers already pulled, and waits for the
// consume loop. Safe to call more than once, and before Start.
func (w *ExpiryWatcher) Stop() {
	w.stop(jetstream.ConsumeContext.Drain, nil)
}

// handle runs on the consume loop, one message at a time; it only queues an
// event on the Publisher, so it never waits on the network.
func (w *ExpiryWatcher) handle(msg jetstream.Msg) {
	if msg.Headers().Get(jetstream.MarkerReasonHeader) != "MaxAge" {
		w.seen.WithLabelValues(expOther).Inc()
		return
	}
	if md, err := msg.Metadata(); err == nil && !w.firstTime(md.Sequence.Stream) {
		w.seen.WithLabelValues(expDuplicate).Inc()
		return
	}
	key := strings.TrimPrefix(msg.Subject(), w.prefix)
	id, err := claims.ParseKVKey(key)
	if err != nil {
		w.seen.WithLabelValues(expUndecodable).Inc()
		w.log.Debug("expiry marker under a key that is not a claim", "key", key, "err", err)
		return
	}
	w.pub.ClaimExpired(id, "")
	w.seen.WithLabelValues(expExpired).Inc()
}

// firstTime records seq and reports whether it was new among the last
// recentSeqs recorded.
func (w *ExpiryWatcher) firstTime(seq uint64) bool {
	if _, ok := w.set[seq]; ok {
		return false
	}
	if old := w.ring[w.next]; old != 0 {
		delete(w.set, old)
	}
	w.ring[w.next] = seq
	w.set[seq] = struct{}{}
	w.next = (w.next + 1) % len(w.ring)
	return true
}
