package events_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// startWatcher starts an ExpiryWatcher of the claims bucket reporting
// through pub, stopped with the test (before pub is closed).
func startWatcher(t *testing.T, js jetstream.JetStream, pub *events.Publisher, opts ...events.ExpiryOption) *events.ExpiryWatcher {
	t.Helper()
	return started[*events.ExpiryWatcher](t)(events.NewExpiryWatcher(js, kvstore.BucketNames(prefix).Claims, pub, opts...))
}

// node is one fleet member: its own connection, publisher and watcher.
func (e *env) node(t *testing.T, reg prometheus.Registerer) {
	t.Helper()
	nc := e.k.Connect(t)
	startWatcher(t, testkit.JetStream(t, nc), newPublisher(t, nc), events.WithRegisterer(reg))
}

func TestExpiredClaimIsReportedOnceFleetWide(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sink(t)
	reg := prometheus.NewRegistry()
	e.node(t, reg)
	e.node(t, reg) // two nodes share one durable consumer

	hostile := []claims.ID{
		{Tenant: "a.b", Source: "*", Key: "k.1"},
		{Tenant: "*", Source: ">", Key: "x y"},
		{Tenant: "acme", Source: "gh", Key: "plain"},
	}
	for i, id := range hostile {
		e.claim(t, id, fmt.Sprintf("h%d", i), time.Second)
	}
	// A committed claim and a live pending claim produce no expiry (yet).
	live := claims.ID{Tenant: "acme", Source: "gh", Key: "live"}
	rev := e.claim(t, live, "hl", 30*time.Second)
	if err := e.store.Settle(testkit.Context(t), live, "hl", rev, time.Hour); err != nil {
		t.Fatal(err)
	}

	testkit.Eventually(t, 5*time.Second, func() bool {
		for _, id := range hostile {
			if s.count(e.subj.ClaimExpired(id.Tenant)) < 1 {
				return false
			}
		}
		return true
	}, "every expired claim reported")

	// A later expiry passes through the same consumer after the first ones:
	// once it is reported, any duplicate of the first ones would have been.
	sentinel := claims.ID{Tenant: "sentinel", Source: "s", Key: "k"}
	e.claim(t, sentinel, "hs", time.Second)
	testkit.Eventually(t, 5*time.Second, func() bool { return s.count(e.subj.ClaimExpired("sentinel")) == 1 }, "sentinel reported")

	for _, id := range hostile {
		got := s.on(e.subj.ClaimExpired(id.Tenant))
		if len(got) != 1 {
			t.Fatalf("%+v reported %d times, want once", id, len(got))
		}
		ev := got[0].ev
		if ev.Tenant != id.Tenant || ev.Source != id.Source || ev.Key != id.Key || ev.HookID != "" || ev.At.IsZero() {
			t.Fatalf("payload %+v for %+v", ev, id)
		}
	}
	if n := s.count(e.subj.ClaimExpired("acme")); n != 1 {
		t.Fatalf("acme expiries = %d, want 1 (the committed claim is live)", n)
	}
	if v := metric(t, reg, "sluice_events_expiry_messages_total", "outcome", "expired"); v != 4 {
		t.Fatalf("expired messages = %v, want 4", v)
	}
	// The non-marker messages may still be on their way to the consumer.
	// Only the live claim's two are sure to reach it: a 1 s claim's create
	// can expire from the stream before a loaded machine delivers it (CI
	// saw 5 of 6), and then its marker is all the watcher sees.
	testkit.Eventually(t, 5*time.Second, func() bool {
		return metric(t, reg, "sluice_events_expiry_messages_total", "outcome", "other") >= 2
	}, "other messages >= 2 (the live claim's create and settle)")
}

func TestReleasedClaimIsNotReportedExpired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sink(t)
	pub := e.publisher(t)
	startWatcher(t, e.k.JS, pub)
	st := events.ObserveStore(e.store, pub)
	ctx := testkit.Context(t)

	id := claims.ID{Tenant: "t.1", Source: "gh", Key: "k"}
	rev := claimOK(t, ctx, st, id, "h1", 3*time.Second)
	if err := st.Release(ctx, id, "h1", rev); err != nil {
		t.Fatal(err)
	}
	// The purge marker lives 1 s; a sentinel expiring 2 s after the release
	// is reported after the marker is gone.
	e.claim(t, claims.ID{Tenant: "sentinel", Source: "s", Key: "k"}, "hs", 2*time.Second)
	testkit.Eventually(t, 6*time.Second, func() bool { return s.count(e.subj.ClaimExpired("sentinel")) == 1 }, "sentinel reported")

	if n := s.count(e.subj.ClaimReleased("t.1")); n != 1 {
		t.Fatalf("released events = %d, want 1", n)
	}
	if n := s.count(e.subj.ClaimPending("t.1")); n != 1 {
		t.Fatalf("pending events = %d, want 1", n)
	}
	if n := s.count(e.subj.ClaimExpired("t.1")); n != 0 {
		t.Fatalf("a released claim was reported expired %d times", n)
	}
}

func TestExpiryWatcherSkipsKeysThatAreNotClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sink(t)
	reg := prometheus.NewRegistry()
	startWatcher(t, e.k.JS, e.publisher(t), events.WithRegisterer(reg))
	ctx := testkit.Context(t)
	if _, err := e.bucket.Put(ctx, "not-a-claim", []byte("x"), time.Second); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		return metric(t, reg, "sluice_events_expiry_messages_total", "outcome", "undecodable") == 1
	}, "undecodable marker counted")
	if n := s.count(e.subj.ClaimEvents()); n != 0 {
		t.Fatalf("events = %d", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.msgs) != 0 {
		t.Fatalf("published %d events for a key that is not a claim", len(s.msgs))
	}
}

func TestExpiryWatcherResumesAfterReconnect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := natsembed.ServerConfig{StoreDir: dir, Listen: testkit.FreeAddr(t)}
	srv, err := natsembed.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown() })

	connect := func() *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	nc, watch := connect(), connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	b, err := kvstore.OpenBucket(ctx, js, kvstore.BucketConfig{Name: kvstore.BucketNames(prefix).Claims, LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := newStore(t, b)
	subj, _ := protocol.NewSubjects(prefix)
	s := &sink{}
	if _, err := watch.Subscribe(subj.Events(), func(m *nats.Msg) {
		s.mu.Lock()
		s.msgs = append(s.msgs, sunk{subject: m.Subject})
		s.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(nc, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	startWatcher(t, js, pub)

	claimOne := func(tenant string) {
		t.Helper()
		ctx, cancel := shortCtx(t)
		defer cancel()
		claimOK(t, ctx, store, claims.ID{Tenant: tenant, Source: "s", Key: "k"}, "h", time.Second)
	}
	claimOne("before")
	testkit.Eventually(t, 5*time.Second, func() bool { return s.count(subj.ClaimExpired("before")) == 1 }, "expiry before the restart")

	// The server goes away and comes back on the same port and data.
	srv.Shutdown()
	testkit.Eventually(t, 5*time.Second, func() bool { return !nc.IsConnected() }, "client noticed the outage")
	srv, err = natsembed.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return nc.IsConnected() && watch.IsConnected() }, "clients reconnected")
	// Wait until JetStream answers again before writing.
	testkit.Eventually(t, 10*time.Second, func() bool {
		ctx, cancel := shortCtx(t)
		defer cancel()
		_, err := b.Get(ctx, "probe")
		return err == nil || errorsIsNotFound(err)
	}, "jetstream ready after restart")

	claimOne("after")
	testkit.Eventually(t, 8*time.Second, func() bool { return s.count(subj.ClaimExpired("after")) == 1 }, "expiry after the restart")
	if n := s.count(subj.ClaimExpired("before")); n != 1 {
		t.Fatalf("the expiry before the restart was reported %d times", n)
	}
}

func shortCtx(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(testkit.Context(t), 2*time.Second)
}

func errorsIsNotFound(err error) bool { return errors.Is(err, kvstore.ErrNotFound) }
