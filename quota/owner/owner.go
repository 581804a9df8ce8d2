package owner

import (
	"context"
	"errors"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/quota/internal/lease"
)

// run is the worker's background goroutine: the lease loop until Stop,
// then the shutdown.
func (w *Worker) run() {
	defer close(w.done)
	w.leases.Run(w.stopCh)
	w.shutdown()
}

// shutdown releases everything (Stop).
func (w *Worker) shutdown() {
	// Frames sent to the member subject now get no responders: clients go
	// back to the partition subjects, where a peer takes over. The frames
	// already received are served first (dropped, their callers would wait
	// out their deadlines).
	if w.routeSub != nil {
		ctx, cancel := context.WithTimeout(context.Background(), w.leases.RenewEvery())
		drainAll(ctx, []*nats.Subscription{w.routeSub})
		cancel()
	}
	w.leases.HandBackAll()
	// Retired tenures' requests and anything else still in flight.
	w.inflight.close()
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.LeaseTTL)
	err := w.inflight.wait(ctx)
	if err != nil {
		w.stopErr = errors.Join(w.stopErr, err)
	}
	cancel()
	w.runners.stop(err == nil) // past the timeout, runners still busy end on their own
	w.leases.Close()
	w.log.Info("quota worker stopped")
}

// leaseOwner is the Worker as the lease loop's lease.Owner: a lease held
// is a tenure serving the partition. Its methods run on the loop's
// goroutine.
type leaseOwner struct{ w *Worker }

// Acquired subscribes a new tenure to the partition's subject and serves
// it.
func (o leaseOwner) Acquired(l *lease.Lease) error {
	w := o.w
	t := w.newTenure(l)
	if err := t.subscribe(); err != nil {
		return err
	}
	w.tenures[l.N] = t
	w.served[l.N].Store(t)
	w.met.leases.WithLabelValues("acquired").Inc()
	w.held(l.N, true)
	return nil
}

// Lost ends the partition's tenure at once; requests already received are
// answered not_owner (the tenure has ended) rather than dropped: their
// clients retry at once.
func (o leaseOwner) Lost(l *lease.Lease, _ string) {
	w := o.w
	t := w.tenures[l.N]
	if t == nil {
		return
	}
	t.end()
	if t.sub != nil {
		if err := t.sub.Drain(); err != nil {
			_ = t.sub.Unsubscribe()
		}
	}
	delete(w.tenures, l.N)
	w.retired = append(w.retired, t)
	w.met.leases.WithLabelValues("lost").Inc()
	w.held(l.N, false)
}

// HandBack ends the tenures of ls (late requests get not_owner and are
// retried by their clients), drains their subscriptions and waits for
// their requests in flight.
func (o leaseOwner) HandBack(ctx context.Context, ls []*lease.Lease, connected bool) {
	w := o.w
	ts := make([]*tenure, 0, len(ls))
	for _, l := range ls {
		if t := w.tenures[l.N]; t != nil {
			t.end()
			ts = append(ts, t)
		}
	}
	subs := make([]*nats.Subscription, 0, len(ts))
	for _, t := range ts {
		if t.sub != nil {
			subs = append(subs, t.sub)
		}
	}
	if connected {
		drainAll(ctx, subs)
	} else {
		// Nothing to drain, and KV calls would wait out their timeouts:
		// the leases will expire.
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}
	for _, t := range ts {
		_ = t.inflight.wait(ctx)
	}
}

// HandedBack forgets the tenures of ls.
func (o leaseOwner) HandedBack(ls []*lease.Lease) {
	w := o.w
	for _, l := range ls {
		delete(w.tenures, l.N)
		w.met.leases.WithLabelValues("released").Inc()
		w.held(l.N, false)
	}
}

// Tick drops idle GCRA state and counters, and forgets retired tenures
// with nothing in flight.
func (o leaseOwner) Tick() {
	w := o.w
	for _, t := range w.tenures {
		t.sweep()
	}
	w.retired = slices.DeleteFunc(w.retired, func(t *tenure) bool { return t.inflight.idle() })
}

// held records partition n as held or not, for Partitions and the gauge.
func (w *Worker) held(n int, held bool) {
	w.mu.Lock()
	i, found := slices.BinarySearch(w.snapshot, n)
	switch {
	case held && !found:
		w.snapshot = slices.Insert(w.snapshot, i, n)
	case !held && found:
		w.snapshot = slices.Delete(w.snapshot, i, i+1)
	}
	size := len(w.snapshot)
	w.mu.Unlock()
	w.met.owned.Set(float64(size))
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
