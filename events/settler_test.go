package events_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/owner"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/ownerkit"
)

// startSettler starts a Settler on store, stopped with the test.
func (e *env) startSettler(t *testing.T, store claims.Store, opts ...events.SettlerOption) *events.Settler {
	t.Helper()
	return started[*events.Settler](t)(events.NewSettler(e.k.JS, store, storeCommitter{store}, prefix, opts...))
}

// storeCommitter is the narrow seam of these tests: it commits in store
// (claims.Store.Settle, the owner's settle of a claim it did not grant)
// instead of at a partition owner, so a test chooses the store's failures.
// TestSettleBySubjectCommits runs the real one.
type storeCommitter struct{ store claims.Store }

func (c storeCommitter) Settle(ctx context.Context, r protocol.SettleRequest) error {
	id := claims.ID{Tenant: r.Tenant, Source: r.Source, Key: r.Key}
	return c.store.Settle(ctx, id, r.HookID, r.Revision, time.Hour)
}

// drained reports whether the settler consumer has nothing pending, nothing
// unacknowledged and never redelivered anything, and the stream is empty.
func (e *env) drained(t *testing.T) (bool, string) {
	t.Helper()
	ctx := testkit.Context(t)
	c, err := e.k.JS.Consumer(ctx, events.StreamName(prefix), events.DefaultSettlerDurable)
	if err != nil {
		return false, err.Error()
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return false, err.Error()
	}
	st, err := e.k.JS.Stream(ctx, events.StreamName(prefix))
	if err != nil {
		return false, err.Error()
	}
	si, err := st.Info(ctx)
	if err != nil {
		return false, err.Error()
	}
	desc := fmt.Sprintf("pending %d ack pending %d redelivered %d stream msgs %d",
		ci.NumPending, ci.NumAckPending, ci.NumRedelivered, si.State.Msgs)
	return ci.NumPending == 0 && ci.NumAckPending == 0 && si.State.Msgs == 0, desc
}

func (e *env) waitDrained(t *testing.T) {
	t.Helper()
	var desc string
	testkit.Eventually(t, 5*time.Second, func() bool {
		var ok bool
		ok, desc = e.drained(t)
		return ok
	}, "settle stream drained")
	_ = desc
}

func settleEvent(id claims.ID, hookID string, rev uint64) protocol.SettleEvent {
	return protocol.SettleEvent{Tenant: id.Tenant, Source: id.Source, Key: id.Key, HookID: hookID, Revision: rev}
}

// TestSettleBySubjectCommits: a settle event takes the one settle path,
// the partition owner's (a real worker and quota Router), which commits
// the claim with the owner's dedupe TTL; another hook id's event for the
// same claim is lost.
func TestSettleBySubjectCommits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	_, qc := ownerkit.Serving(t, e.k, e.store, 4, owner.WithDedupeTTL(time.Hour))
	started[*events.Settler](t)(events.NewSettler(e.k.JS, e.store, qc, prefix, events.WithRegisterer(reg)))

	id := claims.ID{Tenant: "a.b", Source: "*", Key: "k 1"}
	rev := e.claim(t, id, "h1", 30*time.Second)
	e.publishEvent(t, e.subj.Settle(), settleEvent(id, "h2", rev))
	testkit.Eventually(t, 5*time.Second, func() bool {
		return metric(t, reg, "sluice_events_applied_total", "op", "settle", "outcome", "lost") == 1
	}, "another hook id's settle lost")
	e.publishEvent(t, e.subj.Settle(), settleEvent(id, "h1", rev))

	testkit.Eventually(t, 5*time.Second, func() bool { return e.state(t, id).State == protocol.StateCommitted }, "claim committed")
	st := e.state(t, id)
	if st.HookID != "h1" || st.ExpiresIn < 59*time.Minute || st.ExpiresIn > time.Hour {
		t.Fatalf("committed state %+v, want hook h1 expiring in ~1h (the committed TTL)", st)
	}
	if v := metric(t, reg, "sluice_events_applied_total", "op", "settle", "outcome", "ok"); v != 1 {
		t.Fatalf("settle ok = %v", v)
	}
	e.waitDrained(t)
}

func TestReleaseBySubjectRemoves(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	e.startSettler(t, e.store, events.WithRegisterer(reg))

	id := claims.ID{Tenant: "acme", Source: "gh", Key: "k"}
	rev := e.claim(t, id, "h1", 30*time.Second)
	e.publishEvent(t, e.subj.Release(), settleEvent(id, "h1", rev))

	testkit.Eventually(t, 5*time.Second, func() bool { return e.state(t, id).State == protocol.StateAbsent }, "claim released")
	if v := metric(t, reg, "sluice_events_applied_total", "op", "release", "outcome", "ok"); v != 1 {
		t.Fatalf("release ok = %v", v)
	}
	// The key can be claimed again at once.
	e.claim(t, id, "h2", 30*time.Second)
	e.waitDrained(t)
}

func TestEventsPublishedWhileNoSettlerRunsAreApplied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A first settler creates the stream and consumer, then the node stops.
	first, err := events.NewSettler(e.k.JS, e.store, storeCommitter{e.store}, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	first.Stop()
	first.Stop() // idempotent
	if err := first.Start(testkit.Context(t)); !errors.Is(err, events.ErrStarted) {
		t.Fatalf("restart of a stopped settler: %v, want ErrStarted", err)
	}

	const n = 10
	ids := make([]claims.ID, n)
	for i := range ids {
		ids[i] = claims.ID{Tenant: "acme", Source: "gh", Key: fmt.Sprintf("k%d", i)}
		rev := e.claim(t, ids[i], "h", 30*time.Second)
		subject := e.subj.Settle()
		if i%2 == 1 {
			subject = e.subj.Release()
		}
		e.publishEvent(t, subject, settleEvent(ids[i], "h", rev))
	}
	for i, id := range ids {
		if st := e.state(t, id); st.State != protocol.StatePending {
			t.Fatalf("claim %d applied with no settler running: %+v", i, st)
		}
	}

	e.startSettler(t, e.store)
	testkit.Eventually(t, 5*time.Second, func() bool {
		for i, id := range ids {
			want := protocol.StateCommitted
			if i%2 == 1 {
				want = protocol.StateAbsent
			}
			if e.state(t, id).State != want {
				return false
			}
		}
		return true
	}, "every event applied once a settler starts")
	e.waitDrained(t)
}

func TestTwoSettlersApplyEachEventOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	a := &countingStore{Store: e.store}
	b := &countingStore{Store: e.store}
	e.startSettler(t, a, events.WithRegisterer(reg))
	e.startSettler(t, b, events.WithRegisterer(reg))

	const n = 60
	ids := make([]claims.ID, n)
	for i := range ids {
		ids[i] = claims.ID{Tenant: fmt.Sprintf("t%d", i%3), Source: "s", Key: fmt.Sprintf("k%d", i)}
		rev := e.claim(t, ids[i], fmt.Sprintf("h%d", i), 30*time.Second)
		e.publishEvent(t, e.subj.Settle(), settleEvent(ids[i], fmt.Sprintf("h%d", i), rev))
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		return metric(t, reg, "sluice_events_applied_total") == n
	}, "every event handled")
	e.waitDrained(t)
	for i, id := range ids {
		if st := e.state(t, id); st.State != protocol.StateCommitted || st.HookID != fmt.Sprintf("h%d", i) {
			t.Fatalf("claim %d: %+v", i, st)
		}
	}
	if got := a.settles.Load() + b.settles.Load(); got != n {
		t.Fatalf("store settles = %d (a %d, b %d), want %d: an event was applied twice", got, a.settles.Load(), b.settles.Load(), n)
	}
	if v := metric(t, reg, "sluice_events_applied_total", "outcome", "ok"); v != n {
		t.Fatalf("ok = %v, want %d", v, n)
	}
	t.Logf("settler a applied %d, b %d", a.settles.Load(), b.settles.Load())
}

func TestStaleRevisionIsAckedAsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	cs := &countingStore{Store: e.store}
	e.startSettler(t, cs, events.WithRegisterer(reg))

	id := claims.ID{Tenant: "acme", Source: "gh", Key: "k"}
	rev := e.claim(t, id, "h1", 30*time.Second)
	e.publishEvent(t, e.subj.Settle(), settleEvent(id, "h1", rev+1000)) // stale revision
	e.publishEvent(t, e.subj.Release(), settleEvent(id, "other", rev))  // another hook id
	testkit.Eventually(t, 5*time.Second, func() bool {
		return metric(t, reg, "sluice_events_applied_total", "outcome", "lost") == 2
	}, "both counted lost")
	e.waitDrained(t)
	ok, desc := e.drained(t)
	if !ok {
		t.Fatal(desc)
	}
	if got := cs.settles.Load() + cs.releases.Load(); got != 2 {
		t.Fatalf("store calls = %d, want 2 (lost is not retried)", got)
	}
	if st := e.state(t, id); st.State != protocol.StatePending || st.Revision != rev {
		t.Fatalf("claim changed: %+v", st)
	}
	assertNoRedelivery(t, e)
}

func assertNoRedelivery(t *testing.T, e *env) {
	t.Helper()
	ctx := testkit.Context(t)
	// Consumer reads the consumer's info; CachedInfo is that reading.
	c, err := e.k.JS.Consumer(ctx, events.StreamName(prefix), events.DefaultSettlerDurable)
	if err != nil {
		t.Fatal(err)
	}
	if ci := c.CachedInfo(); ci.NumRedelivered != 0 {
		t.Fatalf("redelivered %d", ci.NumRedelivered)
	}
}

func TestMalformedAndInvalidEventsAreTermed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	// The store itself says invalid for the one well-formed event (a store
	// with stricter rules than SettleEvent.Validate).
	cs := &countingStore{Store: e.store, failWith: protocol.ErrInvalid}
	cs.failFirst.Store(1)
	e.startSettler(t, cs, events.WithRegisterer(reg))

	e.publishEvent(t, e.subj.Settle(), []byte(`{"tenant":`))
	e.publishEvent(t, e.subj.Release(), []byte(`not json at all`))
	e.publishEvent(t, e.subj.Settle(), protocol.SettleEvent{Tenant: "acme", Source: "gh", Key: "k", Revision: 1})  // no hook id
	e.publishEvent(t, e.subj.Release(), protocol.SettleEvent{Tenant: "acme", Source: "gh", Key: "k", HookID: "h"}) // no revision
	e.publishEvent(t, e.subj.Settle(), protocol.SettleEvent{Tenant: "acme", Source: "gh", Key: "k", HookID: "h", Revision: 1})

	testkit.Eventually(t, 5*time.Second, func() bool {
		return metric(t, reg, "sluice_events_applied_total", "outcome", "malformed") == 2 &&
			metric(t, reg, "sluice_events_applied_total", "outcome", "invalid") == 3
	}, "2 malformed, 3 invalid")
	e.waitDrained(t)
	assertNoRedelivery(t, e)
	if got := cs.settles.Load() + cs.releases.Load(); got != 1 {
		t.Fatalf("store calls = %d, want 1 (only the well-formed event reaches the store)", got)
	}
}

func TestUnavailableStoreIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	cs := &countingStore{Store: e.store, failWith: fmt.Errorf("%w: test", protocol.ErrUnavailable)}
	cs.failFirst.Store(2)
	e.startSettler(t, cs, events.WithRegisterer(reg), events.WithRetryDelay(20*time.Millisecond, 50*time.Millisecond))

	id := claims.ID{Tenant: "acme", Source: "gh", Key: "k"}
	rev := e.claim(t, id, "h1", 30*time.Second)
	e.publishEvent(t, e.subj.Settle(), settleEvent(id, "h1", rev))
	testkit.Eventually(t, 5*time.Second, func() bool { return e.state(t, id).State == protocol.StateCommitted }, "committed after retries")
	if v := metric(t, reg, "sluice_events_applied_total", "outcome", "unavailable"); v != 2 {
		t.Fatalf("unavailable = %v, want 2", v)
	}
	if v := metric(t, reg, "sluice_events_applied_total", "outcome", "ok"); v != 1 {
		t.Fatalf("ok = %v, want 1", v)
	}
	if got := cs.settles.Load(); got != 3 {
		t.Fatalf("store settles = %d, want 3", got)
	}
	e.waitDrained(t)
}

func TestSettlerStreamAndConsumerConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.startSettler(t, e.store, events.WithStreamLimits(time.Hour, 100, 1<<20), events.WithMaxDeliver(3))
	ctx := testkit.Context(t)
	st, err := e.k.JS.Stream(ctx, "sluice_events")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Retention != jetstream.WorkQueuePolicy || cfg.Storage != jetstream.FileStorage || cfg.MaxAge != time.Hour ||
		cfg.MaxMsgs != 100 || cfg.MaxBytes != 1<<20 || cfg.Discard != jetstream.DiscardOld ||
		len(cfg.Subjects) != 2 || cfg.Subjects[0] != "sluice.v1.events.settle" || cfg.Subjects[1] != "sluice.v1.events.release" {
		t.Fatalf("stream config %+v", cfg)
	}
	c, err := e.k.JS.Consumer(ctx, "sluice_events", "settler")
	if err != nil {
		t.Fatal(err)
	}
	cc := c.CachedInfo().Config
	if cc.AckPolicy != jetstream.AckExplicitPolicy || cc.AckWait != 30*time.Second || cc.MaxDeliver != 3 || len(cc.BackOff) != 0 {
		t.Fatalf("consumer config %+v", cc)
	}
	// Start is idempotent across nodes: a second settler with the same
	// configuration updates nothing and shares the consumer.
	e.startSettler(t, e.store, events.WithStreamLimits(time.Hour, 100, 1<<20), events.WithMaxDeliver(3))
	if err := s.Start(ctx); !errors.Is(err, events.ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
}
