package quota

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
)

// The lease loop: one goroutine (run) owns every lease of the worker.
//
//   - Every renewEvery (TTL/3) it heartbeats (member.<id>, TTL), renews each
//     held lease by CAS+TTL on the lease's revision, sweeps idle state and
//     reconciles.
//   - A watcher on member.* and lease.* keeps a view of live members and
//     lease holders; every change (a put, a purge, a TTL expiry marker)
//     triggers a reconcile at once.
//   - Reconcile computes the assignment (rendezvous hashing with bounded load
//     over the live members) and takes free partitions assigned to this
//     worker (Create with TTL), releases held partitions assigned to another
//     live member (purge by revision), and takes partitions that stayed free
//     for orphanGrace whoever they are assigned to (a dead member still
//     heartbeating, views that disagree for a moment).
//
// Fencing: a tenure serves only while now < its deadline, the send time of
// its last successful renewal + TTL - margin; a renewal that hits a CAS
// conflict ends it at once, as does a watched event showing another holder
// or an expiry. Counter writes are CAS-protected on their own revision.

func (w *Worker) run() {
	defer close(w.done)
	tick := time.NewTicker(w.renewEvery)
	defer tick.Stop()
	for {
		var events <-chan jetstream.KeyValueEntry
		if w.watcher != nil {
			events = w.watcher.Updates()
		}
		select {
		case <-w.stopCh:
			w.shutdown()
			return
		case e, ok := <-events:
			if !ok {
				w.log.Warn("quota: lease watcher closed; restarting on the next tick")
				w.watcher = nil
				continue
			}
			w.apply(e)
			w.drainEvents()
			w.reconcile()
		case <-tick.C:
			w.onTick()
		}
	}
}

// drainEvents applies the events already queued, so a burst of changes
// costs one reconcile.
func (w *Worker) drainEvents() {
	for w.watcher != nil {
		select {
		case e, ok := <-w.watcher.Updates():
			if !ok {
				w.watcher = nil
				return
			}
			w.apply(e)
		default:
			return
		}
	}
}

func (w *Worker) onTick() {
	ctx, cancel := context.WithTimeout(w.life, w.renewEvery)
	defer cancel()
	if err := w.heartbeat(ctx); err != nil {
		w.log.Debug("quota: heartbeat failed", "err", err)
	}
	w.renewAll()
	w.sweep()
	w.checkWatcher()
	if w.watcher == nil {
		if err := w.startWatcher(); err != nil {
			w.log.Debug("quota: restart lease watcher", "err", err)
		}
	}
	w.reconcile()
}

// checkWatcher retires a watcher that has not echoed this worker's own
// heartbeat within two renewal periods: its consumer is stuck (a server
// died under it) and the view would go stale.
func (w *Worker) checkWatcher() {
	if w.watcher == nil || w.hbRev == 0 || w.view.maxRev >= w.hbRev || time.Since(w.hbAt) < 2*w.renewEvery {
		return
	}
	w.log.Warn("quota: lease watcher fell behind; restarting it", "heartbeat_revision", w.hbRev, "seen_revision", w.view.maxRev)
	w.retireWatcher()
}

// startWatcher watches member.* and lease.* from their current values on.
// The watcher keeps w.life for its whole life (nats.go re-creates its
// ordered consumer with it).
func (w *Worker) startWatcher() error {
	w.view.reset(w.cfg.partitions, w.staleAfter())
	w.hbRev = 0
	kw, err := w.leases.KV().WatchFiltered(w.life, []string{memberFilter, leaseFilter})
	if err != nil {
		return kvstore.MapError(err)
	}
	w.watcher = kw
	return nil
}

// retireWatcher stops the watcher in the background (stopping deletes its
// consumer, which can wait out the JetStream API timeout when the server is
// gone) and drains it so its callback never blocks. shutdown waits for it.
func (w *Worker) retireWatcher() {
	kw := w.watcher
	w.watcher = nil
	if kw == nil {
		return
	}
	w.bg.Go(func() {
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
func (w *Worker) apply(e jetstream.KeyValueEntry) {
	if e == nil {
		w.view.synced = true
		return
	}
	now := time.Now()
	w.view.maxRev = max(w.view.maxRev, e.Revision())
	key := e.Key()
	live := e.Operation() == jetstream.KeyValuePut
	if strings.HasPrefix(key, memberStem) {
		if id, err := kvstore.DecodeToken(key[len(memberStem):]); err == nil {
			w.view.heartbeat(id, live, now)
		}
		return
	}
	n, ok := parseLeaseKey(key, w.cfg.partitions)
	if !ok {
		return
	}
	holder := ""
	if live {
		holder = parseOwner(e.Value())
		w.view.hold(n, holder, e.Revision(), now)
	} else {
		prev := w.view.holders[n]
		w.view.free(n, now)
		// A lease its holder should have kept went away: the holder died
		// (expiry) or is stopping (purge). Leave it out of the assignment
		// until it heartbeats again, so its partitions move at once rather
		// than when its heartbeat expires.
		if prev != "" && prev != w.id && w.view.synced {
			members := w.view.live(w.id, now)
			if _, ok := slices.BinarySearch(members, prev); ok && assign(members, w.cfg.partitions)[n] == prev {
				w.view.suspects[prev] = true
			}
		}
	}
	t := w.owned[n]
	if t == nil || e.Revision() <= t.rev {
		return // not ours, or an event older than our last write
	}
	switch {
	case holder == w.id:
		t.rev = e.Revision() // a renewal whose ack we missed
	case holder == "":
		w.lose(t, "lease expired or purged")
	default:
		w.lose(t, "lease taken by "+holder)
	}
}

// reconcile acquires and releases leases to match the assignment.
func (w *Worker) reconcile() {
	if !w.view.synced {
		return
	}
	now := time.Now()
	w.purgeStrays(now)
	want := assign(w.view.live(w.id, now), w.cfg.partitions)
	var acquire []int
	var orphan []bool
	var release []*tenure
	for n, m := range want {
		if t := w.owned[n]; t != nil {
			// An orphan taken against the assignment is kept for a lease
			// TTL, so a member that heartbeats but does not serve cannot
			// make a partition flap.
			if m != w.id && (!t.orphan || now.Sub(t.acquired) >= w.cfg.leaseTTL) {
				release = append(release, t)
			}
			continue
		}
		holder, since := w.view.holder(n, now)
		if holder != "" {
			continue
		}
		switch {
		case m == w.id:
			acquire, orphan = append(acquire, n), append(orphan, false)
		case now.Sub(since) >= w.orphanGrace:
			acquire, orphan = append(acquire, n), append(orphan, true)
		}
	}
	if len(release) > 0 {
		w.release(release)
	}
	if len(acquire) > 0 {
		w.acquire(acquire, orphan)
	}
}

// purgeStrays frees leases that name this worker but that it does not hold
// (a Create whose ack was lost, a tenure lost while KV was slow, an earlier
// process with the same member id): each is purged by its revision, which
// fails harmlessly if the lease moved on. Each revision is tried once.
func (w *Worker) purgeStrays(now time.Time) {
	var ns []int
	for n, id := range w.view.holders {
		if id == w.id && w.owned[n] == nil && w.view.revs[n] != w.strayTried[n] {
			if h, _ := w.view.holder(n, now); h != "" {
				ns = append(ns, n)
			}
		}
	}
	if len(ns) == 0 {
		return
	}
	parallel(len(ns), func(i int) {
		ctx, cancel := context.WithTimeout(w.life, w.renewEvery)
		defer cancel()
		_ = w.leases.Purge(ctx, leaseKey(ns[i]), w.view.revs[ns[i]])
	})
	for _, n := range ns {
		w.strayTried[n] = w.view.revs[n]
		w.log.Debug("quota: purged a stray lease", "partition", n, "revision", w.view.revs[n])
	}
}

// parallel runs fn(i) for i in 0..n-1 concurrently and waits for all.
func parallel(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fn(i) })
	}
	wg.Wait()
}

// acquire tries to create the leases of ps.
func (w *Worker) acquire(ps []int, orphan []bool) {
	type result struct {
		rev       uint64
		sent      time.Time
		holder    string
		holderRev uint64
		err       error
	}
	res := make([]result, len(ps))
	val := w.leaseValue()
	parallel(len(ps), func(i int) {
		ctx, cancel := context.WithTimeout(w.life, w.renewEvery)
		defer cancel()
		res[i].sent = time.Now()
		rev, rec, err := w.leases.Create(ctx, leaseKey(ps[i]), val, w.cfg.leaseTTL)
		res[i].rev, res[i].err = rev, err
		if rec != nil {
			res[i].holder, res[i].holderRev = parseOwner(rec.Value), rec.Revision
		}
	})
	changed := false
	for i, n := range ps {
		r := res[i]
		switch {
		case r.err == nil:
			t := w.newTenure(n, r.rev, r.sent, orphan[i])
			if err := t.subscribe(); err != nil {
				w.log.Warn("quota: subscribe to partition failed; giving the lease back", "partition", n, "err", err)
				ctx, cancel := context.WithTimeout(w.life, w.renewEvery)
				_ = w.leases.Purge(ctx, leaseKey(n), r.rev)
				cancel()
				continue
			}
			w.owned[n] = t
			w.served[n].Store(t)
			w.view.hold(n, w.id, r.rev, time.Now())
			w.met.leases.WithLabelValues("acquired").Inc()
			w.log.Debug("quota: partition acquired", "partition", n, "revision", r.rev, "orphan", orphan[i])
			changed = true
		case errors.Is(r.err, kvstore.ErrExists):
			if r.holder != "" {
				w.view.hold(n, r.holder, r.holderRev, time.Now())
			}
		default:
			w.log.Debug("quota: acquire lease failed", "partition", n, "err", r.err)
		}
	}
	if changed {
		w.setSnapshot()
	}
}

// renewAll renews every held lease by CAS+TTL.
func (w *Worker) renewAll() {
	ts := make([]*tenure, 0, len(w.owned))
	for _, t := range w.owned {
		ts = append(ts, t)
	}
	if len(ts) == 0 {
		return
	}
	type result struct {
		rev  uint64
		sent time.Time
		err  error
		rec  *kvstore.Record
	}
	res := make([]result, len(ts))
	val := w.leaseValue()
	parallel(len(ts), func(i int) {
		ctx, cancel := context.WithTimeout(w.life, w.renewEvery)
		defer cancel()
		res[i].sent = time.Now()
		res[i].rev, res[i].err = w.leases.Update(ctx, leaseKey(ts[i].n), val, ts[i].rev, w.cfg.leaseTTL)
		if errors.Is(res[i].err, kvstore.ErrWrongLastSequence) {
			res[i].rec, _ = w.leases.GetLeader(ctx, leaseKey(ts[i].n))
		}
	})
	for i, t := range ts {
		if w.owned[t.n] != t {
			continue // lost meanwhile (a watched event)
		}
		r := res[i]
		switch {
		case r.err == nil:
			t.rev = r.rev
			t.setDeadline(r.sent)
		case errors.Is(r.err, kvstore.ErrWrongLastSequence):
			if r.rec != nil && parseOwner(r.rec.Value) == w.id && r.rec.Revision > t.rev {
				t.rev = r.rec.Revision // an earlier renewal landed after all
				continue
			}
			w.lose(t, "renewal conflict")
		default:
			if w.sinceBase() >= t.deadline.Load() {
				w.lose(t, "renewal failed past the lease deadline: "+r.err.Error())
			} else {
				w.log.Debug("quota: renewal failed; retrying", "partition", t.n, "err", r.err)
			}
		}
	}
}

// lose ends a tenure whose lease is gone: stop serving at once, no purge.
func (w *Worker) lose(t *tenure, why string) {
	t.end()
	if t.sub != nil {
		// Requests already received are answered not_owner (the tenure has
		// ended) rather than dropped: their clients retry at once.
		if err := t.sub.Drain(); err != nil {
			_ = t.sub.Unsubscribe()
		}
	}
	delete(w.owned, t.n)
	if w.view.holders[t.n] == w.id {
		w.view.free(t.n, time.Now())
	}
	w.retired = append(w.retired, t)
	w.met.leases.WithLabelValues("lost").Inc()
	w.log.Warn("quota: partition lost", "partition", t.n, "reason", why)
	w.setSnapshot()
}

// release hands leases back: stop serving (late requests get not_owner and
// are retried by their clients), drain the subscriptions, wait for the
// tenures' in-flight requests, then purge each lease by revision so a peer
// can take it at once.
func (w *Worker) release(ts []*tenure) {
	for _, t := range ts {
		t.end()
	}
	ctx, cancel := context.WithTimeout(w.life, w.cfg.leaseTTL)
	defer cancel()
	connected := w.nc.IsConnected()
	if connected {
		drainTenures(ctx, ts)
	} else {
		// Nothing to drain, and KV calls would wait out their timeouts:
		// the leases will expire.
		for _, t := range ts {
			if t.sub != nil {
				_ = t.sub.Unsubscribe()
			}
		}
	}
	parallel(len(ts), func(i int) {
		t := ts[i]
		_ = t.inflight.wait(ctx)
		if !connected {
			return
		}
		pctx, pcancel := context.WithTimeout(ctx, w.renewEvery)
		defer pcancel()
		if err := w.leases.Purge(pctx, leaseKey(t.n), t.rev); err != nil {
			w.log.Debug("quota: purge lease failed; it will expire", "partition", t.n, "err", err)
		}
	})
	for _, t := range ts {
		delete(w.owned, t.n)
		w.view.free(t.n, time.Now())
		w.met.leases.WithLabelValues("released").Inc()
		w.log.Debug("quota: partition released", "partition", t.n)
	}
	w.setSnapshot()
}

// drainTenures drains the tenures' subscriptions (see drainAll).
func drainTenures(ctx context.Context, ts []*tenure) {
	subs := make([]*nats.Subscription, 0, len(ts))
	for _, t := range ts {
		if t.sub != nil {
			subs = append(subs, t.sub)
		}
	}
	drainAll(ctx, subs)
}

// drainAll drains subscriptions and waits until they are closed (or ctx
// ends, then unsubscribes outright).
func drainAll(ctx context.Context, subs []*nats.Subscription) {
	var waits []<-chan nats.SubStatus
	var draining []*nats.Subscription
	for _, sub := range subs {
		ch := sub.StatusChanged(nats.SubscriptionClosed)
		if err := sub.Drain(); err != nil {
			_ = sub.Unsubscribe()
			continue
		}
		waits = append(waits, ch)
		draining = append(draining, sub)
	}
	for i, ch := range waits {
		select {
		case <-ch:
		case <-ctx.Done():
			for _, sub := range draining[i:] {
				_ = sub.Unsubscribe()
			}
			return
		}
	}
}

// sweep drops idle GCRA state and counters, and forgets retired tenures
// with nothing in flight.
func (w *Worker) sweep() {
	for _, t := range w.owned {
		t.sweep()
	}
	w.retired = slices.DeleteFunc(w.retired, func(t *tenure) bool { return t.inflight.idle() })
}

// shutdown releases everything (Stop).
func (w *Worker) shutdown() {
	// Frames sent to the member subject now get no responders: clients go
	// back to the partition subjects, where a peer takes over. The frames
	// already received are served first (dropped, their callers would wait
	// out their deadlines).
	if w.routeSub != nil {
		ctx, cancel := context.WithTimeout(context.Background(), w.renewEvery)
		drainAll(ctx, []*nats.Subscription{w.routeSub})
		cancel()
	}
	ts := make([]*tenure, 0, len(w.owned))
	for _, t := range w.owned {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *tenure) int { return a.n - b.n })
	w.release(ts)
	// Retired tenures' requests and anything else still in flight.
	w.inflight.close()
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.leaseTTL)
	err := w.inflight.wait(ctx)
	if err != nil {
		w.stopErr = errors.Join(w.stopErr, err)
	}
	cancel()
	w.runners.stop(err == nil) // past the timeout, runners still busy end on their own
	if w.nc.IsConnected() {
		pctx, pcancel := context.WithTimeout(context.Background(), w.renewEvery)
		if err := w.leases.Purge(pctx, memberKey(w.id), 0); err != nil {
			w.log.Debug("quota: remove heartbeat failed; it will expire", "err", err)
		}
		pcancel()
	}
	w.retireWatcher()
	w.bg.Wait()
	w.cancel()
	w.log.Info("quota worker stopped")
}
