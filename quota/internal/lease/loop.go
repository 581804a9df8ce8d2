// Package lease keeps a quota worker's partition leases: its heartbeat in
// the leases bucket, a watched view of the live members and the lease
// holders, the assignment of partitions to members, and the loop that
// takes, renews, releases and loses leases. It tells the owner of the
// leases (quota's Worker) what happened through Owner; it knows nothing of
// what the owner serves.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// The lease loop: one goroutine (Run) owns every lease of the worker. Every
// renewEvery (TTL/3) it heartbeats, renews each held lease by CAS+TTL and
// reconciles; a watcher on member.* and lease.* reconciles on every change.
// Reconcile takes the free partitions the assignment gives this worker,
// releases those it gives another live member, and takes any that stayed
// free for orphanGrace (a dead member still heartbeating, views that
// disagree for a moment). Fencing: docs/DESIGN.md "Partitions, leases and
// fencing".

// ErrPartitionMismatch: the fleet was created with another partition count.
var ErrPartitionMismatch = errors.New("quota: partition count mismatch")

// ErrShardMismatch: the fleet was created with another shard count.
var ErrShardMismatch = errors.New("quota: shard count mismatch")

// shardsField is the record's shards field for n shards: 0 (omitted) for
// one, so that a fleet without shards records what it always did.
func shardsField(n int) int {
	if n <= 1 {
		return 0
	}
	return n
}

// Owner is told what happens to the leases. Every call is made on the
// loop's goroutine (Run, HandBackAll), one at a time.
type Owner interface {
	// Acquired starts serving l's partition: its lease was just created.
	// An error gives the lease back at once.
	Acquired(l *Lease) error
	// Lost stops serving l's partition at once: its lease is gone
	// (expired, purged, taken by another member, a renewal conflict).
	Lost(l *Lease, why string)
	// HandBack stops serving the partitions of ls and returns when their
	// requests in flight are done or ctx ends; their leases are purged
	// then. connected is false when the connection is down (nothing can be
	// drained; the leases will expire).
	HandBack(ctx context.Context, ls []*Lease, connected bool)
	// HandedBack: the leases of ls were handed back.
	HandedBack(ls []*Lease)
	// Tick runs once per renewal period.
	Tick()
}

// Lease is one holding of one partition's lease: from a successful Create
// to its release or loss.
type Lease struct {
	N      int  // the partition
	Orphan bool // taken against the assignment (it stayed free too long)
	// Lapsed: the previous holder's lease ran out instead of being handed
	// back (it died or stopped renewing), so whatever it admitted lately is
	// unknown; the owner starts such a partition from a conservative state.
	Lapsed   bool
	Acquired time.Time // when it was created

	rev      uint64       // revision of the last write; loop goroutine only
	base     time.Time    // the loop's monotonic reference
	deadline atomic.Int64 // nanoseconds since base: valid only before it
}

// Valid reports whether the lease may still be served: its deadline (the
// last renewal's send time + TTL - margin) has not passed.
func (l *Lease) Valid() bool { return int64(time.Since(l.base)) < l.deadline.Load() }

// Config configures a Loop.
type Config struct {
	Bucket     *kvstore.Bucket // the leases bucket
	Conn       *nats.Conn      // whether it is connected decides a release's drain
	ID         string          // the member id
	Partitions int
	Shards     int           // the fleet's shard count, recorded beside Partitions (0 counts as 1)
	TTL        time.Duration // of leases and heartbeats
	Log        *slog.Logger
}

// Loop keeps one member's leases (see the package comment). Start, then
// Run on one goroutine; after Run returns, HandBackAll and Close.
type Loop struct {
	cfg         Config
	owner       Owner
	renewEvery  time.Duration // heartbeat and renewal period
	margin      time.Duration // a lease stops being valid this long before its TTL runs out
	orphanGrace time.Duration // a free partition nobody takes is taken by anyone after this
	base        time.Time

	life   context.Context // ends at Close; for the watcher and KV calls
	cancel context.CancelFunc
	bg     sync.WaitGroup // retired watchers being stopped

	// Owned by the loop goroutine.
	held       map[int]*Lease
	strayTried []uint64 // partition -> lease revision purgeStrays last tried
	watcher    jetstream.KeyWatcher
	view       view
	hbRev      uint64    // revision of the oldest heartbeat the watcher has not echoed
	hbAt       time.Time // when it was written
	beating    bool      // a heartbeat was written (Close removes it)

	members atomic.Int32 // live members at the last reconcile (Members)
}

// New returns a loop for cfg that reports to owner.
func New(cfg Config, owner Owner) *Loop {
	l := &Loop{
		cfg:         cfg,
		owner:       owner,
		renewEvery:  cfg.TTL / 3,
		margin:      cfg.TTL / 4,
		orphanGrace: cfg.TTL / 2,
		base:        time.Now(),
		held:        make(map[int]*Lease),
		strayTried:  make([]uint64, cfg.Partitions),
	}
	l.life, l.cancel = context.WithCancel(context.Background())
	l.view.reset(cfg.Partitions, l.staleAfter(), l.lapseAfter())
	return l
}

// RenewEvery is the heartbeat and renewal period (TTL/3).
func (l *Loop) RenewEvery() time.Duration { return l.renewEvery }

// staleAfter is how long a heartbeat or lease may go unrenewed before the
// view presumes it gone: a TTL plus one renewal period.
func (l *Loop) staleAfter() time.Duration { return l.cfg.TTL + l.renewEvery }

// lapseAfter is how long after its last write (server times) a lease that
// went away had lapsed rather than been handed back: TTL - margin, when
// fencing stops its holder serving it (Lease.Valid).
func (l *Loop) lapseAfter() time.Duration { return l.cfg.TTL - l.margin }

// Members is the number of live members (heartbeating, this one included)
// as of the last reconcile; 0 before the first. Safe for concurrent use.
func (l *Loop) Members() int { return int(l.members.Load()) }

// startBudget bounds Start's writes when its context has no deadline.
const startBudget = 30 * time.Second

// Start checks the fleet's partition count (recording it if this is the
// fleet's first member; ErrPartitionMismatch when it differs), heartbeats
// and starts watching the bucket. ctx bounds the calls. After an error,
// Close.
func (l *Loop) Start(ctx context.Context) error {
	// A bucket created a moment ago on a forming cluster may not answer
	// until its stream has a leader ("no response from stream"): the two
	// writes retry unavailability, bounded by ctx (by startBudget when ctx
	// has no deadline). A mismatched partition count is final.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startBudget)
		defer cancel()
	}
	if err := kvstore.Retry(ctx, l.checkPartitions); err != nil {
		return err
	}
	if err := kvstore.Retry(ctx, l.heartbeat); err != nil {
		return fmt.Errorf("quota: heartbeat: %w", err)
	}
	if err := l.startWatcher(); err != nil {
		return fmt.Errorf("quota: watch leases: %w", err)
	}
	return nil
}

// checkPartitions records the fleet's partition count once and refuses
// another one.
func (l *Loop) checkPartitions(ctx context.Context) error {
	want, wantShards := l.cfg.Partitions, max(l.cfg.Shards, 1)
	val, _ := json.Marshal(partitionsRecord{Partitions: want, Shards: shardsField(wantShards)})
	b := l.cfg.Bucket
	for range 3 {
		_, rec, err := b.Create(ctx, configKey, val, 0)
		if err == nil {
			return nil
		}
		if !errors.Is(err, kvstore.ErrExists) {
			return fmt.Errorf("quota: record partition count: %w", err)
		}
		if rec == nil {
			continue // vanished meanwhile: try again
		}
		got, gotShards, err := parsePartitions(b, rec)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%w: the fleet has %d partitions, this node is configured with %d", ErrPartitionMismatch, got, want)
		}
		if gotShards != wantShards {
			return fmt.Errorf("%w: the fleet has %d shards, this node is configured with %d (--partitions %d/%d; the shard count is fixed for the fleet's life)",
				ErrShardMismatch, gotShards, wantShards, got, gotShards)
		}
		return nil
	}
	return fmt.Errorf("quota: record partition count: key %s keeps changing", configKey)
}

// heartbeat writes the member record with a TTL and remembers the oldest
// revision the watcher has yet to echo (see checkWatcher).
func (l *Loop) heartbeat(ctx context.Context) error {
	val, _ := json.Marshal(memberRecord{ID: l.cfg.ID, Partitions: l.cfg.Partitions, Server: l.server()})
	rev, err := l.cfg.Bucket.Put(ctx, memberKey(l.cfg.ID), val, l.cfg.TTL)
	if err == nil {
		l.beating = true
		if l.hbRev == 0 || l.view.echoed(l.hbRev) {
			l.hbRev, l.hbAt = rev, time.Now()
		}
	}
	return err
}

// server is the NATS server the member's connection is on now ("" when
// it is not connected).
func (l *Loop) server() string {
	if !l.cfg.Conn.IsConnected() {
		return ""
	}
	return l.cfg.Conn.ConnectedServerName()
}

// assign is Assign over members as the view has them.
func (l *Loop) assign(members []string) []string {
	return Assign(members, l.view.hosts(members, l.cfg.ID, l.server()), l.cfg.Partitions, max(l.cfg.Shards, 1))
}

func (l *Loop) leaseValue() []byte {
	val, _ := json.Marshal(leaseRecord{Owner: l.cfg.ID})
	return val
}

// Run runs the loop until stop is closed. The leases are still held then:
// HandBackAll hands them back.
func (l *Loop) Run(stop <-chan struct{}) {
	tick := time.NewTicker(l.renewEvery)
	defer tick.Stop()
	for {
		var events <-chan jetstream.KeyValueEntry
		if l.watcher != nil {
			events = l.watcher.Updates()
		}
		select {
		case <-stop:
			return
		case e, ok := <-events:
			if !ok {
				l.cfg.Log.Warn("quota: lease watcher closed; restarting on the next tick")
				l.watcher = nil
				continue
			}
			l.apply(e)
			l.drainEvents()
			l.reconcile()
		case <-tick.C:
			l.onTick()
		}
	}
}

// drainEvents applies the events already queued, so a burst of changes
// costs one reconcile.
func (l *Loop) drainEvents() {
	for l.watcher != nil {
		select {
		case e, ok := <-l.watcher.Updates():
			if !ok {
				l.watcher = nil
				return
			}
			l.apply(e)
		default:
			return
		}
	}
}

func (l *Loop) onTick() {
	ctx, cancel := context.WithTimeout(l.life, l.renewEvery)
	defer cancel()
	if err := l.heartbeat(ctx); err != nil {
		l.cfg.Log.Debug("quota: heartbeat failed", "err", err)
	}
	l.renewAll()
	l.owner.Tick()
	l.checkWatcher()
	if l.watcher == nil {
		if err := l.startWatcher(); err != nil {
			l.cfg.Log.Debug("quota: restart lease watcher", "err", err)
		}
	}
	l.reconcile()
}

// checkWatcher retires a watcher that has not echoed this member's own
// heartbeat within two renewal periods: its consumer is stuck (a server
// died under it) and the view would go stale.
func (l *Loop) checkWatcher() {
	if l.watcher == nil || l.hbRev == 0 || l.view.echoed(l.hbRev) || time.Since(l.hbAt) < 2*l.renewEvery {
		return
	}
	l.cfg.Log.Warn("quota: lease watcher fell behind; restarting it", "heartbeat_revision", l.hbRev, "seen_revision", l.view.maxRev)
	l.retireWatcher()
}

// startWatcher watches member.* and lease.* from their current values on.
// The watcher keeps l.life for its whole life (nats.go re-creates its
// ordered consumer with it).
func (l *Loop) startWatcher() error {
	l.view.reset(l.cfg.Partitions, l.staleAfter(), l.lapseAfter())
	l.hbRev = 0
	kw, err := l.cfg.Bucket.KV().WatchFiltered(l.life, []string{memberFilter, leaseFilter})
	if err != nil {
		return kvstore.MapError(err)
	}
	l.watcher = kw
	return nil
}

// retireWatcher stops the watcher in the background (stopping deletes its
// consumer, which can wait out the JetStream API timeout when the server is
// gone) and drains it so its callback never blocks. Close waits for it.
func (l *Loop) retireWatcher() {
	kw := l.watcher
	l.watcher = nil
	if kw == nil {
		return
	}
	l.bg.Go(func() {
		_ = kw.Stop()
		timeout := time.NewTimer(10 * time.Second)
		defer timeout.Stop()
		for {
			select {
			case _, ok := <-kw.Updates():
				if !ok {
					return
				}
			case <-timeout.C:
				return
			}
		}
	})
}

// apply folds one watched entry into the view (nil: initial values done).
func (l *Loop) apply(e jetstream.KeyValueEntry) {
	if e == nil {
		l.view.markSynced()
		return
	}
	now := time.Now()
	l.view.observe(e.Revision())
	key := e.Key()
	live := e.Operation() == jetstream.KeyValuePut
	if strings.HasPrefix(key, memberStem) {
		if id, err := protocol.DecodeToken(key[len(memberStem):]); err == nil {
			server := ""
			if live {
				server = parseServer(e.Value())
			}
			l.view.heartbeat(id, server, live, now)
		}
		return
	}
	n, ok := parseLeaseKey(key, l.cfg.Partitions)
	if !ok {
		return
	}
	self := l.cfg.ID
	holder := ""
	if live {
		holder = parseOwner(e.Value())
		l.view.hold(n, holder, e.Revision(), now, e.Created())
	} else {
		prev, _ := l.view.raw(n)
		l.view.free(n, now, l.view.lapsedBy(n, e.Created()))
		// A lease its holder should have kept went away: the holder died
		// (expiry) or is stopping (purge). Leave it out of the assignment
		// until it heartbeats again, so its partitions move at once rather
		// than when its heartbeat expires.
		if prev != "" && prev != self && l.view.synced {
			members := l.view.live(self, now)
			if _, ok := slices.BinarySearch(members, prev); ok && l.assign(members)[n] == prev {
				l.view.suspect(prev)
			}
		}
	}
	h := l.held[n]
	if h == nil || e.Revision() <= h.rev {
		return // not ours, or an event older than our last write
	}
	switch {
	case holder == self:
		h.rev = e.Revision() // a renewal whose ack we missed
	case holder == "":
		l.lose(h, "lease expired or purged")
	default:
		l.lose(h, "lease taken by "+holder)
	}
}

// reconcile acquires and releases leases to match the assignment.
func (l *Loop) reconcile() {
	if !l.view.synced {
		return
	}
	now := time.Now()
	l.purgeStrays(now)
	live := l.view.live(l.cfg.ID, now)
	l.members.Store(int32(len(live)))
	want := l.assign(live)
	var acquire []int
	var orphan []bool
	var release []*Lease
	for n, m := range want {
		if h := l.held[n]; h != nil {
			// An orphan taken against the assignment is kept for a lease
			// TTL, so a member that heartbeats but does not serve cannot
			// make a partition flap.
			if m != l.cfg.ID && (!h.Orphan || now.Sub(h.Acquired) >= l.cfg.TTL) {
				release = append(release, h)
			}
			continue
		}
		holder, since := l.view.holder(n, now)
		if holder != "" {
			continue
		}
		switch {
		case m == l.cfg.ID:
			acquire, orphan = append(acquire, n), append(orphan, false)
		case now.Sub(since) >= l.orphanGrace:
			acquire, orphan = append(acquire, n), append(orphan, true)
		}
	}
	if len(release) > 0 {
		l.release(release)
	}
	if len(acquire) > 0 {
		l.acquire(acquire, orphan)
	}
}

// purgeStrays frees leases that name this member but that it does not hold
// (a Create whose ack was lost, a lease lost while KV was slow, an earlier
// process with the same member id): each is purged by its revision, which
// fails harmlessly if the lease moved on. Each revision is tried once.
func (l *Loop) purgeStrays(now time.Time) {
	var ns []int
	var revs []uint64
	for _, n := range l.view.heldBy(l.cfg.ID) {
		_, rev := l.view.raw(n)
		if l.held[n] == nil && rev != l.strayTried[n] {
			if h, _ := l.view.holder(n, now); h != "" {
				ns, revs = append(ns, n), append(revs, rev)
			}
		}
	}
	if len(ns) == 0 {
		return
	}
	parallel(l.life, l.renewEvery, len(ns), func(ctx context.Context, i int) {
		_ = l.cfg.Bucket.Purge(ctx, leaseKey(ns[i]), revs[i])
	})
	for i, n := range ns {
		l.strayTried[n] = revs[i]
		l.cfg.Log.Debug("quota: purged a stray lease", "partition", n, "revision", revs[i])
	}
}

// parallel runs fn(ctx, i) for i in 0..n-1 concurrently, each ctx parent
// bounded by timeout, and waits for all.
func parallel(parent context.Context, timeout time.Duration, n int, fn func(ctx context.Context, i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(parent, timeout)
			defer cancel()
			fn(ctx, i)
		})
	}
	wg.Wait()
}

// setDeadline records a successful write of h sent at sent: the server
// started its TTL after sent, so sent + TTL - margin is safe.
func (l *Loop) setDeadline(h *Lease, sent time.Time) {
	h.deadline.Store(int64(sent.Sub(l.base) + l.cfg.TTL - l.margin))
}

// acquire tries to create the leases of ps.
func (l *Loop) acquire(ps []int, orphan []bool) {
	type result struct {
		rev       uint64
		sent      time.Time
		holder    string
		holderRev uint64
		holderAt  time.Time
		err       error
	}
	res := make([]result, len(ps))
	val := l.leaseValue()
	parallel(l.life, l.renewEvery, len(ps), func(ctx context.Context, i int) {
		res[i].sent = time.Now()
		rev, rec, err := l.cfg.Bucket.Create(ctx, leaseKey(ps[i]), val, l.cfg.TTL)
		res[i].rev, res[i].err = rev, err
		if rec != nil {
			res[i].holder, res[i].holderRev, res[i].holderAt = parseOwner(rec.Value), rec.Revision, rec.Created
		}
	})
	for i, n := range ps {
		r := res[i]
		switch {
		case r.err == nil:
			now := time.Now()
			h := &Lease{N: n, Orphan: orphan[i], Lapsed: l.view.lapsed(n, now), Acquired: now, rev: r.rev, base: l.base}
			l.setDeadline(h, r.sent)
			if err := l.owner.Acquired(h); err != nil {
				l.cfg.Log.Warn("quota: serving the partition failed; giving the lease back", "partition", n, "err", err)
				ctx, cancel := context.WithTimeout(l.life, l.renewEvery)
				_ = l.cfg.Bucket.Purge(ctx, leaseKey(n), r.rev)
				cancel()
				continue
			}
			l.held[n] = h
			l.view.hold(n, l.cfg.ID, r.rev, now, r.sent)
			l.cfg.Log.Debug("quota: partition acquired", "partition", n, "revision", r.rev, "orphan", orphan[i], "lapsed", h.Lapsed)
		case errors.Is(r.err, kvstore.ErrExists):
			if r.holder != "" {
				l.view.hold(n, r.holder, r.holderRev, time.Now(), r.holderAt)
			}
		default:
			l.cfg.Log.Debug("quota: acquire lease failed", "partition", n, "err", r.err)
		}
	}
}

// renewAll renews every held lease by CAS+TTL.
func (l *Loop) renewAll() {
	hs := make([]*Lease, 0, len(l.held))
	for _, h := range l.held {
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return
	}
	type result struct {
		rev  uint64
		sent time.Time
		err  error
		rec  *kvstore.Record
	}
	res := make([]result, len(hs))
	val := l.leaseValue()
	parallel(l.life, l.renewEvery, len(hs), func(ctx context.Context, i int) {
		res[i].sent = time.Now()
		res[i].rev, res[i].err = l.cfg.Bucket.Update(ctx, leaseKey(hs[i].N), val, hs[i].rev, l.cfg.TTL)
		if errors.Is(res[i].err, kvstore.ErrWrongLastSequence) {
			res[i].rec, _ = l.cfg.Bucket.GetLeader(ctx, leaseKey(hs[i].N))
		}
	})
	for i, h := range hs {
		if l.held[h.N] != h {
			continue // lost meanwhile (a watched event)
		}
		r := res[i]
		switch {
		case r.err == nil:
			h.rev = r.rev
			l.setDeadline(h, r.sent)
		case errors.Is(r.err, kvstore.ErrWrongLastSequence):
			if r.rec != nil && parseOwner(r.rec.Value) == l.cfg.ID && r.rec.Revision > h.rev {
				h.rev = r.rec.Revision // an earlier renewal landed after all
				continue
			}
			l.lose(h, "renewal conflict")
		default:
			if !h.Valid() {
				l.lose(h, "renewal failed past the lease deadline: "+r.err.Error())
			} else {
				l.cfg.Log.Debug("quota: renewal failed; retrying", "partition", h.N, "err", r.err)
			}
		}
	}
}

// lose drops a lease that is gone: the owner stops serving it at once; no
// purge.
func (l *Loop) lose(h *Lease, why string) {
	l.owner.Lost(h, why)
	delete(l.held, h.N)
	if id, _ := l.view.raw(h.N); id == l.cfg.ID {
		l.view.free(h.N, time.Now(), true) // our state went with it
	}
	l.cfg.Log.Warn("quota: partition lost", "partition", h.N, "reason", why)
}

// release hands leases back: the owner stops serving them and waits for
// their requests in flight (Owner.HandBack), then each lease is purged by
// revision so a peer can take it at once.
func (l *Loop) release(hs []*Lease) {
	ctx, cancel := context.WithTimeout(l.life, l.cfg.TTL)
	defer cancel()
	connected := l.cfg.Conn.IsConnected()
	l.owner.HandBack(ctx, hs, connected)
	if connected {
		parallel(ctx, l.renewEvery, len(hs), func(pctx context.Context, i int) {
			h := hs[i]
			if err := l.cfg.Bucket.Purge(pctx, leaseKey(h.N), h.rev); err != nil {
				l.cfg.Log.Debug("quota: purge lease failed; it will expire", "partition", h.N, "err", err)
			}
		})
	}
	for _, h := range hs {
		delete(l.held, h.N)
		l.view.free(h.N, time.Now(), false)
		l.cfg.Log.Debug("quota: partition released", "partition", h.N)
	}
	l.owner.HandedBack(hs)
}

// HandBackAll hands every lease back, in partition order (Stop). Call it
// after Run returned, on the same goroutine.
func (l *Loop) HandBackAll() {
	hs := make([]*Lease, 0, len(l.held))
	for _, h := range l.held {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b *Lease) int { return a.N - b.N })
	l.release(hs)
}

// Close removes the member's heartbeat (when connected), stops the
// watcher and waits for it, and ends the loop's context.
func (l *Loop) Close() {
	if l.beating && l.cfg.Conn.IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), l.renewEvery)
		if err := l.cfg.Bucket.Purge(ctx, memberKey(l.cfg.ID), 0); err != nil {
			l.cfg.Log.Debug("quota: remove heartbeat failed; it will expire", "err", err)
		}
		cancel()
	}
	l.retireWatcher()
	// A retired watcher's Stop deletes its consumer with a JetStream API
	// request that, without a meta leader (the last node stopping), waits
	// out its 5 s timeout. Wait at most half a second: the request ends
	// when the connection closes, and with it the goroutine.
	waited := make(chan struct{})
	go func() { l.bg.Wait(); close(waited) }()
	t := time.NewTimer(min(l.renewEvery, 500*time.Millisecond))
	select {
	case <-waited:
	case <-t.C:
		l.cfg.Log.Debug("quota: not waiting for the lease watcher's consumer deletion; it ends with the connection")
	}
	t.Stop()
	l.cancel()
}

// parsePartitions reads a config.partitions record: the partition and
// shard counts (1 when the record names none).
func parsePartitions(b *kvstore.Bucket, rec *kvstore.Record) (partitions, shards int, err error) {
	var got partitionsRecord
	if err := json.Unmarshal(rec.Value, &got); err != nil || got.Partitions < 1 || got.Shards < 0 {
		return 0, 0, fmt.Errorf("quota: bucket %s key %s holds %q, not a partition count", b.Name(), configKey, rec.Value)
	}
	return got.Partitions, max(got.Shards, 1), nil
}

// Partitions reads the partition and shard counts a fleet recorded in its
// leases bucket b (kvstore.ErrNotFound before any member started).
func Partitions(ctx context.Context, b *kvstore.Bucket) (partitions, shards int, err error) {
	rec, err := b.Get(ctx, configKey)
	if err != nil {
		return 0, 0, err
	}
	return parsePartitions(b, rec)
}
