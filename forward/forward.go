// Package forward moves a leaf's hooks from its outbox (a local
// work-queue stream, hooks.EnsureOutbox) to the hub's hooks stream across
// the leaf-node connection, in order and none twice: one owned goroutine
// publishes each batch as one JetStream atomic batch and acks the outbox only
// after the hub's ack and sync barrier. Why atomic batches, the fallback to one
// hook at a time and the duplicate lookup: docs/DESIGN.md "Leaf mode".
package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/internal/promreg"
	"github.com/sluice-dev/sluice/internal/retry"
	"github.com/sluice-dev/sluice/protocol"
)

// Durable is the name of the forwarder's consumer on the outbox.
const Durable = "sluice_forwarder"

// Config configures a Forwarder.
type Config struct {
	// Conn is the leaf's connection to its embedded server (the outbox is
	// local; the hub is reached through the leaf connection).
	Conn *nats.Conn
	// Prefix is the subject prefix, HooksStream the hub's hooks stream
	// (the outbox is hooks.OutboxStream of it), HubDomain the hub's
	// JetStream domain.
	Prefix, HooksStream, HubDomain string
	// Name is this leaf's name (the message id of an outbox message
	// without a hook id: "<name>-<outbox sequence>").
	Name string
	// Linked reports whether the leaf connection to the hub is up; while it
	// is not, nothing is fetched.
	Linked func() bool
	// Batch bounds the hooks in flight to the hub, one atomic batch
	// (default 256; at most 1000 to a batch).
	Batch int
	// PublishTimeout bounds the wait for the hub's ack of one batch or one
	// hook (default 5 s).
	PublishTimeout time.Duration
	// HubClaims, when set, is the hub's claims store: the claim of every
	// forwarded hook with a dedupe key is written there (create-if-absent,
	// then settled with DedupeTTL; pending for PendingTTL meanwhile), and a
	// key the hub holds for another hook is a split key: counted and given
	// to OnSplit.
	HubClaims             func(ctx context.Context) (claims.Store, error)
	PendingTTL, DedupeTTL time.Duration
	OnSplit               func(id claims.ID, hookID, hubHookID string)
	// HubShards, when set, reads the hub's shard count (its fleet record,
	// quota.FleetShape, through the hub's domain) at each link-up: each
	// hook goes to its tenant's shard's stream on the hub
	// (protocol.ShardPublishSubject), and nothing is sent while it is
	// unknown. Nil: the hub has one shard.
	HubShards func(ctx context.Context) (int, error)
	// Route, when set, is checked with every status refresh (the hub's
	// partition count is read there once per link-up) and its state shown
	// in Status.
	Route *Route
	// HubSyncFallback is how long after a batch's ack the outbox copy is
	// kept when the hub does not serve its sync barrier (protocol.HubSyncSubject: an
	// older hub) before it is dropped (default 2 s: twice an older
	// single-node hub's record round, durability.RecordInterval, which
	// syncs every stream).
	HubSyncFallback time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failed batch or
	// while the link is down (defaults 50 ms and 2 s; doubled per failure).
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	Registerer             prometheus.Registerer
}

// Status is what /readyz shows of the forwarder.
type Status struct {
	Linked bool `json:"hub_linked"`
	// Backlog is the hooks in the outbox (not yet acknowledged by the hub)
	// and OldestAge the age of the oldest of them, in seconds.
	Backlog   uint64  `json:"backlog"`
	OldestAge float64 `json:"backlog_oldest_age_seconds"`
	LastError string  `json:"last_error,omitempty"`
	// Quota is who decides the leaf's rate limits and quotas: "hub", or
	// why the leaf decides them itself (Route).
	Quota string `json:"quota,omitempty"`
}

// Forwarder moves hooks from the outbox to the hub. Start it once, Stop it
// once.
type Forwarder struct {
	cfg    Config
	local  jetstream.JetStream
	hub    jetstream.JetStream
	cons   jetstream.Consumer
	outbox jetstream.Stream
	log    *slog.Logger

	stop chan struct{}
	wg   sync.WaitGroup

	status     atomic.Pointer[Status]
	lastErr    atomic.Pointer[string] // the last forwarding error, nil after a success
	hubWindow  atomic.Int64           // the hub stream's duplicate window (ns); 0: unknown
	hubAtomic  atomic.Bool            // the hub stream allows atomic batches
	hubKnown   atomic.Bool            // hubWindow, hubAtomic and hubShards were read since the link came up
	hubShards  atomic.Int64           // the hub's shard count; 0: unknown
	legacySync atomic.Bool            // the hub's lack of a sync barrier was logged since the link came up
	linkUp     atomic.Int64           // when the link last came up (unix ns; 0 while it is down): watchLink
	mark       uint64                 // outbox sequences up to it may have been sent by an earlier run

	forwarded *prometheus.CounterVec // result
	syncs     *prometheus.CounterVec // result
	splits    prometheus.Counter
	backlog   prometheus.Gauge
	oldest    prometheus.Gauge
	linkGauge prometheus.Gauge
}

// ErrInvalidConfig is wrapped by the error of Config.Validate, and so of
// New.
var ErrInvalidConfig = errors.New("forward: invalid config")

// Validate refuses a Config without a connection, Linked, a prefix or the
// hub's domain, or with a negative batch, timeout, backoff or TTL; zero
// keeps the default.
func (cfg *Config) Validate() error {
	switch {
	case cfg.Conn == nil || cfg.Linked == nil || cfg.Prefix == "" || cfg.HubDomain == "":
		return fmt.Errorf("%w: needs a connection, Linked, a prefix and the hub's domain", ErrInvalidConfig)
	case cfg.Batch < 0, cfg.PublishTimeout < 0, cfg.HubSyncFallback < 0, cfg.MinBackoff < 0, cfg.MaxBackoff < 0,
		cfg.PendingTTL < 0, cfg.DedupeTTL < 0:
		return fmt.Errorf("%w: negative batch, timeout, backoff or TTL", ErrInvalidConfig)
	}
	return nil
}

// New returns a forwarder for cfg. Errors: ErrInvalidConfig, JetStream's.
func New(cfg Config) (*Forwarder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HooksStream == "" {
		cfg.HooksStream = protocol.HooksStreamName
	}
	if cfg.Batch == 0 {
		cfg.Batch = 256
	}
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = 5 * time.Second
	}
	if cfg.HubSyncFallback == 0 {
		cfg.HubSyncFallback = 2 * time.Second
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 50 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(cfg.MinBackoff, 2*time.Second)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PendingTTL == 0 {
		cfg.PendingTTL = protocol.DefaultPendingTTL
	}
	if cfg.DedupeTTL == 0 {
		cfg.DedupeTTL = protocol.DefaultCommittedTTL
	}
	local, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, err
	}
	hub, err := jetstream.NewWithDomain(cfg.Conn, cfg.HubDomain)
	if err != nil {
		return nil, err
	}
	ms := promreg.NewSet(cfg.Registerer, "edge")
	f := &Forwarder{
		cfg: cfg, local: local, hub: hub, log: cfg.Logger, stop: make(chan struct{}),
		forwarded: ms.CounterVec("forwarded_total", "Outbox hooks by forwarding result: stored (the hub stored it), duplicate (the hub already had it: a resend inside its duplicate window), found (a late redelivery found on the hub, not sent again), failed (a publish the hub did not acknowledge; sent again).", "result"),
		syncs:     ms.CounterVec("hub_syncs_total", "Sync barriers asked of the hub before an outbox ack, by result: synced (the hub answered: on its disk), waited (no barrier on an older hub: its record round waited for), failed (the copy kept, asked again).", "result"),
		backlog:   ms.Gauge("outbox_messages", "Hooks stored at this leaf and not yet acknowledged by the hub."),
		oldest:    ms.Gauge("outbox_oldest_age_seconds", "Age of the oldest hook in the outbox (0 when it is empty)."),
		splits:    ms.Counter("split_keys_total", "Dedupe keys this leaf accepted while the hub's side had accepted them for another hook (found when forwarding)."),
		linkGauge: ms.Gauge("hub_linked", "1 while the leaf connection to the hub is up, else 0."),
	}
	if err := ms.Err(); err != nil {
		return nil, err
	}
	// Exported at zero from the start (the alert SluiceForwardFailing).
	promreg.Zero(f.forwarded, []string{"stored", "duplicate", "found", "failed"})
	promreg.Zero(f.syncs, []string{"synced", "waited", "failed"})
	f.status.Store(&Status{})
	return f, nil
}

// markKey is the consumer metadata key holding the sent watermark.
const markKey = "sluice_sent_upto"

// Start (re)creates the durable consumer on the outbox and starts
// forwarding. A consumer left by an earlier run is replaced, so that the
// hooks it had delivered and not acked are forwarded at once rather than
// after its ack wait; every outbox sequence up to the highest it had
// delivered (kept in the consumer's metadata across runs) counts as
// possibly sent, like a redelivery (see alreadyOnHub).
func (f *Forwarder) Start(ctx context.Context) error {
	st, err := f.local.Stream(ctx, hooks.OutboxStream(f.cfg.HooksStream))
	if err != nil {
		return fmt.Errorf("forward: outbox: %w", err)
	}
	var mark uint64
	if old, err := st.Consumer(ctx, Durable); err == nil {
		info := old.CachedInfo()
		mark = info.Delivered.Stream
		if n, err := strconv.ParseUint(info.Config.Metadata[markKey], 10, 64); err == nil {
			mark = max(mark, n)
		}
		if err := st.DeleteConsumer(ctx, Durable); err != nil {
			return fmt.Errorf("forward: replace consumer: %w", err)
		}
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("forward: consumer: %w", err)
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       Durable,
		Description:   "sluice edge: forwards the outbox to the hub",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       max(30*time.Second, 4*f.cfg.PublishTimeout),
		MaxAckPending: f.cfg.Batch,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Metadata:      map[string]string{markKey: strconv.FormatUint(mark, 10)},
	})
	if err != nil {
		return fmt.Errorf("forward: consumer: %w", err)
	}
	f.outbox, f.cons, f.mark = st, cons, mark
	f.refreshStatus(ctx)
	if f.cfg.Linked() {
		f.linkUp.Store(time.Now().UnixNano()) // before any ack of this run
	}
	f.wg.Go(f.watchLink)
	f.wg.Go(f.run)
	return nil
}

// Stop stops forwarding and waits for the goroutine (a batch in flight is
// abandoned: its hooks stay in the outbox and are sent again later, the
// hub dropping those it stored). Safe to call once.
func (f *Forwarder) Stop(ctx context.Context) error {
	close(f.stop)
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status is the last observed link state and backlog.
func (f *Forwarder) Status() Status { return *f.status.Load() }

func (f *Forwarder) stopped() bool {
	select {
	case <-f.stop:
		return true
	default:
		return false
	}
}

// run is the forwarding loop.
func (f *Forwarder) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-f.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	waits := retry.Doubling(f.cfg.MinBackoff, f.cfg.MaxBackoff) // ctx ends with Stop
	var lastStatus time.Time
	wasLinked := false
	for !f.stopped() {
		if time.Since(lastStatus) >= 250*time.Millisecond {
			f.refreshStatus(ctx)
			lastStatus = time.Now()
		}
		linked := f.cfg.Linked()
		if linked != wasLinked {
			if linked {
				f.log.Info("leaf: hub link up; forwarding the outbox")
				f.learnWindow(ctx)
			} else {
				f.log.Warn("leaf: hub link down; hooks stay in the outbox")
				f.hubWindow.Store(0)
				f.hubKnown.Store(false)
				f.legacySync.Store(false)
			}
			wasLinked = linked
		}
		if !linked {
			if retry.Sleep(ctx, waits.NextBackOff()) != nil {
				return
			}
			continue
		}
		batch, err := f.cons.Fetch(f.cfg.Batch, jetstream.FetchMaxWait(250*time.Millisecond))
		if err != nil {
			if retry.Sleep(ctx, waits.NextBackOff()) != nil {
				return
			}
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if len(msgs) == 0 {
			continue
		}
		if f.forward(ctx, msgs) {
			waits.Reset()
		}
	}
}

// learnWindow opens the hub's claims store (HubClaims) so that claims go
// there from the start of the link, and reads the hub's stream (learnHub).
func (f *Forwarder) learnWindow(ctx context.Context) {
	if f.cfg.HubClaims != nil {
		ictx, cancel := context.WithTimeout(ctx, f.cfg.PublishTimeout)
		_, _ = f.cfg.HubClaims(ictx)
		cancel()
	}
	f.learnHub(ctx)
}

// learnHub reads the hub stream's duplicate window and whether it allows
// atomic batches. When it cannot, the window is 0 (every late redelivery
// is looked up) and hooks go one at a time until a later read succeeds.
func (f *Forwarder) learnHub(ctx context.Context) {
	ictx, cancel := context.WithTimeout(ctx, f.cfg.PublishTimeout)
	defer cancel()
	shards := 1
	if f.cfg.HubShards != nil {
		var err error
		if shards, err = f.cfg.HubShards(ictx); err != nil || shards < 1 {
			f.hubShards.Store(0)
			f.hubKnown.Store(false)
			return
		}
	}
	f.hubShards.Store(int64(shards))
	st, err := f.hub.Stream(ictx, f.cfg.HooksStream)
	if err != nil {
		f.hubWindow.Store(0)
		f.hubAtomic.Store(false)
		return
	}
	cfg := st.CachedInfo().Config
	f.hubWindow.Store(int64(cfg.Duplicates))
	f.hubAtomic.Store(cfg.AllowAtomicPublish)
	if !cfg.AllowAtomicPublish {
		f.log.Warn("leaf: the hub's hooks stream does not allow atomic batches (allow_atomic); forwarding one hook at a time",
			"stream", f.cfg.HooksStream)
	}
	f.hubKnown.Store(true)
}

// refreshStatus updates the gauges and the status from the outbox's state.
func (f *Forwarder) refreshStatus(ctx context.Context) {
	s := Status{Linked: f.cfg.Linked()}
	if r := f.cfg.Route; r != nil {
		r.Check(ctx)
		s.Quota = r.State()
	}
	if e := f.lastErr.Load(); e != nil {
		s.LastError = *e
	}
	if f.outbox != nil {
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := f.outbox.Info(ictx)
		cancel()
		if err == nil {
			s.Backlog = info.State.Msgs
			if s.Backlog > 0 && !info.State.FirstTime.IsZero() {
				s.OldestAge = max(0, time.Since(info.State.FirstTime).Seconds())
			}
		} else {
			old := f.status.Load()
			s.Backlog, s.OldestAge = old.Backlog, old.OldestAge
		}
	}
	if s.Linked {
		f.linkGauge.Set(1)
	} else {
		f.linkGauge.Set(0)
	}
	f.backlog.Set(float64(s.Backlog))
	f.oldest.Set(s.OldestAge)
	f.status.Store(&s)
}

// forward sends msgs to the hub until every one is acknowledged there and
// acked in the outbox, or the forwarder stops; true when it took no retry.
func (f *Forwarder) forward(ctx context.Context, msgs []jetstream.Msg) bool {
	waits := retry.Doubling(f.cfg.MinBackoff, f.cfg.MaxBackoff)
	clean := true
	var held []jetstream.Msg // acknowledged by the hub at heldAt, not yet confirmed durable
	var heldAt time.Time
	for len(msgs) > 0 {
		var n int
		var err error
		if held != nil {
			n, err = f.ackDurable(ctx, held, heldAt)
		} else {
			n, err = f.send(ctx, msgs)
		}
		held = nil
		if us, ok := errors.AsType[*unsynced](err); ok {
			held, heldAt = msgs[:us.n], us.acked
		}
		msgs = msgs[n:]
		if err == nil {
			continue
		}
		if f.stopped() {
			return false
		}
		if clean { // once per failing batch, not per retry
			f.log.Warn("leaf: forwarding to the hub failed; retrying", "error", err, "pending", len(msgs))
		}
		clean = false
		e := err.Error()
		f.lastErr.Store(&e)
		f.refreshStatus(ctx)
		if retry.Sleep(ctx, waits.NextBackOff()) != nil {
			return false
		}
		for _, m := range msgs {
			_ = m.InProgress() // keep them ours while we retry
		}
	}
	if !clean {
		f.lastErr.Store(nil)
		f.log.Info("leaf: forwarding to the hub resumed")
	}
	return clean
}

// send publishes msgs to the hub in order and acks in the outbox the
// leading ones the hub acknowledged; it returns how many and the first
// error.
func (f *Forwarder) send(ctx context.Context, msgs []jetstream.Msg) (int, error) {
	if !f.hubKnown.Load() {
		f.learnHub(ctx) // the stream info failed at link-up: read it again
	}
	shards := int(f.hubShards.Load())
	if shards < 1 {
		return 0, errors.New("the hub's shard count is not known (its fleet record could not be read)")
	}
	var items []hubItem
	n, err := len(msgs), error(nil)
	for i, m := range msgs {
		out, id, herr := f.hubMsg(m)
		skip := false
		if herr == nil {
			skip, herr = f.alreadyOnHub(ctx, m, out.Subject, id)
		}
		shard := protocol.Shard(out.Header.Get(hooks.HeaderTenant), shards)
		if herr != nil {
			n, err = i, herr
			break
		}
		if skip {
			f.forwarded.WithLabelValues("found").Inc()
			continue // acked without a publish
		}
		// Published to the shard's stream, stored under out.Subject.
		out.Subject = protocol.ShardPublishSubject(f.cfg.Prefix, shard, shards, out.Subject)
		items = append(items, hubItem{at: i, msg: out, id: id, stream: protocol.ShardName(f.cfg.HooksStream, shard)})
	}
	ok, perr := f.publish(ctx, items, n)
	if perr != nil {
		err = perr
	}
	return f.settle(ctx, msgs, ok, err)
}

// hubItem is one hook to publish: msgs[at]'s hub copy (on its publish
// subject), message id and the hub stream that takes it.
type hubItem struct {
	at     int
	msg    *nats.Msg
	id     string
	stream string
}

// atomicMax bounds the hooks of one atomic batch (nats-server's default
// max_batch_size).
const atomicMax = 1000

// publish stores items on the hub in their order and never lets the hub
// store one while an earlier one is missing: atomic batches when the hub's
// stream allows them, else, and after a refused batch, one hook at a time
// (docs/DESIGN.md "Leaf mode"), each shard's hooks apart (docs/DESIGN.md
// "Shards"). It returns how many leading messages (of n, by index:
// items[k].at) are done and the first failure.
func (f *Forwarder) publish(ctx context.Context, items []hubItem, n int) (int, error) {
	var order []string
	runs := map[string][]hubItem{}
	for _, it := range items {
		if _, ok := runs[it.stream]; !ok {
			order = append(order, it.stream)
		}
		runs[it.stream] = append(runs[it.stream], it)
	}
	first, err := n, error(nil)
	for _, stream := range order {
		run := runs[stream]
		if done, rerr := f.publishRun(ctx, run); rerr != nil && run[done].at < first {
			first, err = run[done].at, rerr
		}
	}
	return first, err
}

// publishRun is publish for items of one hub stream: it returns how many
// leading items are done and, when not all, the failure.
func (f *Forwarder) publishRun(ctx context.Context, items []hubItem) (int, error) {
	for done := 0; done < len(items); {
		chunk := items[done:min(len(items), done+atomicMax)]
		if f.hubAtomic.Load() && len(chunk) > 1 {
			err := f.publishAtomic(ctx, chunk)
			if err == nil {
				f.forwarded.WithLabelValues("stored").Add(float64(len(chunk)))
				done += len(chunk)
				continue
			}
			if !refused(err) { // nothing learned: the same batch again later
				f.forwarded.WithLabelValues("failed").Inc()
				return done, err
			}
			// Refused (a hook the hub will not take, or some it has
			// already: a batch holding a duplicate is refused whole): one
			// at a time, as far as the hub takes them.
			f.log.Debug("leaf: the hub refused a batch; sending it one hook at a time", "error", err, "hooks", len(chunk))
		}
		k, err := f.publishEach(ctx, chunk)
		done += k
		if err != nil {
			return done, err
		}
	}
	return len(items), nil
}

// refused reports whether err is the hub's answer refusing an atomic
// batch (not a timeout, a missing responder or the forwarder stopping).
func refused(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr)
}

// publishAtomic publishes chunk as one atomic batch (Nats-Batch-Id,
// Nats-Batch-Sequence, Nats-Batch-Commit on the last) and waits for the
// commit's ack: the hub stores all of it, in order, or none of it. Only
// the commit asks for an answer: a hook the hub refused, or lost on the
// way, leaves a gap that fails the commit.
func (f *Forwarder) publishAtomic(ctx context.Context, chunk []hubItem) error {
	batch := nuid.Next()
	for j, it := range chunk {
		m := nats.NewMsg(it.msg.Subject)
		m.Data = it.msg.Data
		for k, v := range it.msg.Header {
			m.Header[k] = v
		}
		m.Header.Set(jetstream.MsgIDHeader, it.id)
		m.Header.Set(jetstream.ExpectedStreamHeader, it.stream)
		m.Header.Set(batchIDHeader, batch)
		m.Header.Set(batchSeqHeader, strconv.Itoa(j+1))
		if j < len(chunk)-1 {
			if err := f.cfg.Conn.PublishMsg(m); err != nil {
				return err
			}
			continue
		}
		m.Header.Set(batchCommitHeader, "1")
		pctx, cancel := context.WithTimeout(ctx, f.cfg.PublishTimeout)
		_, err := f.hub.PublishMsg(pctx, m, jetstream.WithRetryAttempts(0))
		cancel()
		if err != nil {
			return fmt.Errorf("hub did not store the batch of %d from %s: %w", len(chunk), chunk[0].msg.Header.Get(hooks.HeaderHookID), err)
		}
	}
	return nil
}

// Headers of JetStream's atomic batch publish (nats-server 2.12+).
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// publishEach publishes chunk one hook at a time, each after the hub's ack
// of the one before; it returns how many the hub acknowledged and the
// first failure.
func (f *Forwarder) publishEach(ctx context.Context, chunk []hubItem) (int, error) {
	for k, it := range chunk {
		pctx, cancel := context.WithTimeout(ctx, f.cfg.PublishTimeout)
		ack, err := f.hub.PublishMsg(pctx, it.msg, jetstream.WithMsgID(it.id), jetstream.WithExpectStream(it.stream),
			jetstream.WithRetryAttempts(0))
		cancel()
		if err != nil {
			f.forwarded.WithLabelValues("failed").Inc()
			return k, fmt.Errorf("hub did not store %s: %w", it.msg.Header.Get(hooks.HeaderHookID), err)
		}
		if ack.Duplicate {
			f.forwarded.WithLabelValues("duplicate").Inc()
		} else {
			f.forwarded.WithLabelValues("stored").Inc()
		}
	}
	return len(chunk), nil
}

// settle registers the claims of msgs[:ok] (acknowledged by the hub) on
// the hub (register, in parallel) and, once the hub has them on disk
// (durable), acks them in the outbox in order up to the first failure; it
// returns how many were acked and the first error (err when all ok
// succeeded; *unsynced when the hub did not confirm them durable).
func (f *Forwarder) settle(ctx context.Context, msgs []jetstream.Msg, ok int, err error) (int, error) {
	acked := time.Now() // after the hub's acks of msgs[:ok]
	regs := make([]error, ok)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range ok {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			regs[i] = f.register(ctx, msgs[i].Headers())
		})
	}
	wg.Wait()
	for i := range ok {
		if regs[i] != nil {
			ok, err = i, regs[i]
			break
		}
	}
	n, aerr := f.ackDurable(ctx, msgs[:ok], acked)
	if aerr != nil {
		return n, aerr
	}
	return ok, err
}

// ackDurable acks msgs (acknowledged by the hub, their claims registered)
// in the outbox once the hub has them on disk, in order up to the first
// failure, so a leaf drops a hook only when a hub power cut can no longer
// lose it. *unsynced: the hub did not confirm them durable, none acked.
func (f *Forwarder) ackDurable(ctx context.Context, msgs []jetstream.Msg, acked time.Time) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	if err := f.durable(ctx, acked); err != nil {
		if errors.Is(err, errLinkChanged) {
			return 0, err // maybe another hub's answer: send them again
		}
		return 0, &unsynced{n: len(msgs), acked: acked, err: err}
	}
	for i, m := range msgs {
		if err := m.Ack(); err != nil {
			return i, fmt.Errorf("outbox ack: %w", err)
		}
	}
	return len(msgs), nil
}

// hubMsg is the hub's copy of an outbox message and its message id.
func (f *Forwarder) hubMsg(m jetstream.Msg) (*nats.Msg, string, error) {
	subj, ok := hooks.HubSubject(f.cfg.Prefix, m.Subject())
	if !ok {
		return nil, "", fmt.Errorf("outbox message on %q: not an outbox subject", m.Subject())
	}
	out := nats.NewMsg(subj)
	for k, v := range m.Headers() {
		out.Header[k] = v
	}
	out.Header.Del(jetstream.ExpectedStreamHeader)
	out.Header.Del(jetstream.MsgIDHeader)
	out.Data = m.Data()
	id := m.Headers().Get(hooks.HeaderHookID)
	if id == "" {
		md, err := m.Metadata()
		if err != nil {
			return nil, "", err
		}
		id = fmt.Sprintf("%s-%d", f.cfg.Name, md.Sequence.Stream)
	}
	return out, id, nil
}

// alreadyOnHub reports whether a hook that may have been sent before (a
// redelivery, or delivered by an earlier run: Start) may already be on the
// hub outside its duplicate window, and is: a first delivery was never
// sent; one whose outbox store time lies within the window of now was (if
// at all) stored on the hub after that time, so the hub's window still
// holds it and drops the resend.
func (f *Forwarder) alreadyOnHub(ctx context.Context, m jetstream.Msg, subject, id string) (bool, error) {
	md, err := m.Metadata()
	if err != nil {
		return false, err
	}
	window := time.Duration(f.hubWindow.Load())
	sentBefore := md.NumDelivered > 1 || md.Sequence.Stream <= f.mark
	if !sentBefore || (window > 0 && time.Since(md.Timestamp) < window-time.Second) {
		return false, nil
	}
	return f.OnHub(ctx, subject, id, md.Timestamp)
}

// OnHub reports whether the hub's hooks stream holds a message on subject
// with hook id id, stored at or after since (a headers-only scan of that
// subject from since).
func (f *Forwarder) OnHub(ctx context.Context, subject, id string, since time.Time) (bool, error) {
	sctx, cancel := context.WithTimeout(ctx, 4*f.cfg.PublishTimeout)
	defer cancel()
	st, err := f.hub.Stream(sctx, f.streamOf(subject))
	if err != nil {
		return false, fmt.Errorf("hub stream: %w", err)
	}
	start := since.Add(-time.Second) // clocks of leaf and hub
	c, err := st.OrderedConsumer(sctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime: &start, HeadersOnly: true,
	})
	if err != nil {
		return false, fmt.Errorf("hub lookup: %w", err)
	}
	for {
		// Read each batch to its end (its goroutine ends with it).
		b, err := c.FetchNoWait(256)
		if err != nil {
			return false, fmt.Errorf("hub lookup: %w", err)
		}
		n, found, last := 0, false, false
		for m := range b.Messages() {
			n++
			found = found || m.Headers().Get(hooks.HeaderHookID) == id
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				last = true
			}
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return false, fmt.Errorf("hub lookup: %w", err)
		}
		if found || n == 0 || last {
			return found, nil
		}
		if sctx.Err() != nil {
			return false, sctx.Err()
		}
	}
}

// register writes the claim of a forwarded hook into the hub's claims
// bucket (create-if-absent, then settled with the dedupe TTL). A key the
// hub holds for another hook was accepted on both sides of a split: it is
// counted (sluice_edge_split_keys_total) and reported (OnSplit), and the
// hook is forwarded all the same.
func (f *Forwarder) register(ctx context.Context, h nats.Header) error {
	if f.cfg.HubClaims == nil {
		return nil
	}
	key := h.Get(hooks.HeaderDedupeKey)
	if key == "" {
		return nil
	}
	if h.Get(hooks.HeaderDedupeKey+"-Encoding") == "percent" {
		k, err := url.PathUnescape(key)
		if err != nil {
			return nil // not written by a leaf: nothing to register
		}
		key = k
	}
	id := claims.ID{Tenant: h.Get(hooks.HeaderTenant), Source: h.Get(hooks.HeaderSource), Key: key}
	hookID := h.Get(hooks.HeaderHookID)
	store, err := f.cfg.HubClaims(ctx)
	if err != nil {
		return fmt.Errorf("hub claims: %w", err)
	}
	res, err := store.Claim(ctx, id, hookID, f.cfg.PendingTTL)
	if errors.Is(err, protocol.ErrInvalid) {
		f.log.Warn("leaf: a forwarded hook's claim is invalid; not registered on the hub", "hook_id", hookID, "error", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("hub claim: %w", err)
	}
	switch {
	case res.Outcome == claims.OK:
		if err := store.SettleOwn(ctx, id, hookID, "", res.Revision, f.cfg.DedupeTTL); err != nil && !errors.Is(err, protocol.ErrClaimLost) {
			return fmt.Errorf("hub settle: %w", err)
		}
	case res.HookID != hookID:
		f.splits.Inc()
		f.log.Warn("leaf: a dedupe key was accepted on both sides of a split", "tenant", id.Tenant, "source", id.Source,
			"hook_id", hookID, "hub_hook_id", res.HookID)
		if f.cfg.OnSplit != nil {
			f.cfg.OnSplit(id, hookID, res.HookID)
		}
	}
	return nil
}

// streamOf is the hub stream holding the hooks stored under subject
// ("<prefix>.hooks.<tenant>.…"): its tenant's shard's.
func (f *Forwarder) streamOf(subject string) string {
	shards := int(f.hubShards.Load())
	rest, _ := strings.CutPrefix(subject, f.cfg.Prefix+".hooks.")
	tok, _, _ := strings.Cut(rest, ".")
	tenant, err := protocol.DecodeToken(tok)
	if shards <= 1 || err != nil {
		return f.cfg.HooksStream
	}
	return protocol.ShardName(f.cfg.HooksStream, protocol.Shard(tenant, shards))
}
