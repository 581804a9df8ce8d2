package events_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

func TestNilPublisherIsNoop(t *testing.T) {
	t.Parallel()
	var p *events.Publisher
	id := claims.ID{Tenant: "t", Source: "s", Key: "k"}
	p.ClaimPending(id, "h", 1)
	p.ClaimCommitted(id, "h", 1)
	p.ClaimReleased(id, "h", 1)
	p.ClaimExpired(id, "")
	p.HookStored("t", "s", "k", "h")
	p.LimitDenied("t", "s", "hooks", time.Second)
	p.Close()
	if p.Subjects() != (protocol.Subjects{}) {
		t.Fatal("nil publisher has subjects")
	}
	inner, err := claims.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	if events.ObserveStore(inner, nil) != claims.Store(inner) {
		t.Fatal("ObserveStore with a nil publisher must return the inner store")
	}
}

func TestPublisherPublishesEveryEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sink(t)
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	reg := prometheus.NewRegistry()
	p := e.publisher(t, events.WithClock(func() time.Time { return at }), events.WithRegisterer(reg))

	long := strings.Repeat("k", claims.MaxKeyBytes+1)
	id := claims.ID{Tenant: "a.b", Source: "*", Key: long}
	p.ClaimPending(id, "h1", 11)
	p.ClaimCommitted(id, "h1", 11)
	p.ClaimReleased(id, "h1", 12)
	p.ClaimExpired(id, "")
	p.HookStored("acme", "g h", "", "h2")
	p.LimitDenied("acme", "gh", "bytes", 1500*time.Microsecond)

	want := []struct {
		subject string
		ev      protocol.Lifecycle
	}{
		{e.subj.ClaimPending("a.b"), protocol.Lifecycle{Tenant: "a.b", Source: "*", Key: claims.NormalizeKey(long), HookID: "h1", Revision: 11}},
		{e.subj.ClaimCommitted("a.b"), protocol.Lifecycle{Tenant: "a.b", Source: "*", Key: claims.NormalizeKey(long), HookID: "h1", Revision: 11}},
		{e.subj.ClaimReleased("a.b"), protocol.Lifecycle{Tenant: "a.b", Source: "*", Key: claims.NormalizeKey(long), HookID: "h1", Revision: 12}},
		{e.subj.ClaimExpired("a.b"), protocol.Lifecycle{Tenant: "a.b", Source: "*", Key: claims.NormalizeKey(long)}},
		{e.subj.HookStored("acme", "g h"), protocol.Lifecycle{Tenant: "acme", Source: "g h", HookID: "h2"}},
		{e.subj.LimitDenied("acme"), protocol.Lifecycle{Tenant: "acme", Source: "gh", Kind: "bytes", RetryAfterMs: 2, Reason: "rate_limited"}},
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.msgs) >= len(want)
	}, "all lifecycle events arrive")
	s.mu.Lock()
	got := append([]sunk(nil), s.msgs...)
	s.mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i, w := range want {
		w.ev.At = at.UTC()
		if got[i].subject != w.subject {
			t.Errorf("%d: subject %q, want %q", i, got[i].subject, w.subject)
		}
		if !got[i].ev.At.Equal(w.ev.At) || got[i].ev.At.Location() != time.UTC {
			t.Errorf("%d: at %v, want %v UTC", i, got[i].ev.At, w.ev.At)
		}
		got[i].ev.At = w.ev.At
		if got[i].ev != w.ev {
			t.Errorf("%d: payload %+v, want %+v", i, got[i].ev, w.ev)
		}
		if !strings.Contains(string(got[i].raw), `"at":"2025-01-02T02:04:05.000000006Z"`) {
			t.Errorf("%d: at not RFC 3339 nano UTC: %s", i, got[i].raw)
		}
	}
	if v := metric(t, reg, "sluice_events_published_total", "outcome", "ok"); v != float64(len(want)) {
		t.Fatalf("published ok = %v", v)
	}
}

func TestPublisherNeverFailsTheCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	nc := e.k.Connect(t)
	p, err := events.NewPublisher(nc, prefix, events.WithRegisterer(reg), events.WithQueueSize(1))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close() // the connection refuses every publish from now on
	id := claims.ID{Tenant: "t", Source: "s", Key: "k"}
	for range 50 {
		p.ClaimPending(id, "h", 1) // returns at once: queued, dropped or refused
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		return metric(t, reg, "sluice_events_published_total", "outcome", "error")+
			metric(t, reg, "sluice_events_published_total", "outcome", "dropped") == 50
	}, "every event counted as refused or dropped")
	p.Close()
	p.Close() // idempotent
	p.ClaimCommitted(id, "h", 1)
	if v := metric(t, reg, "sluice_events_published_total", "outcome", "ok"); v != 0 {
		t.Fatalf("ok = %v on a closed connection", v)
	}
	if v := metric(t, reg, "sluice_events_published_total", "outcome", "error"); v < 1 {
		t.Fatalf("error = %v, want >= 1", v)
	}
	if v := metric(t, reg, "sluice_events_published_total", "outcome", "dropped"); v < 1 {
		t.Fatalf("dropped = %v, want >= 1 (published after Close)", v)
	}
}

func TestObserveStorePublishesStateChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sink(t)
	p := e.publisher(t)
	st := events.ObserveStore(e.store, p)
	ctx := testkit.Context(t)

	a := claims.ID{Tenant: "a.b", Source: "gh", Key: "k1"}
	rev := claimOK(t, ctx, st, a, "h1", 30*time.Second)
	if res2, err := st.Claim(ctx, a, "h2", 30*time.Second); err != nil || res2.Outcome != claims.Pending {
		t.Fatalf("second claim: %+v %v", res2, err)
	}
	if err := st.Settle(ctx, a, "h1", rev+99, time.Hour); err == nil {
		t.Fatal("stale settle succeeded")
	}
	if err := st.Settle(ctx, a, "h1", rev, time.Hour); err != nil {
		t.Fatalf("settle: %v", err)
	}
	if res3, err := st.Claim(ctx, a, "h3", 30*time.Second); err != nil || res3.Outcome != claims.Duplicate {
		t.Fatalf("third claim: %+v %v", res3, err)
	}
	if got, err := st.Get(ctx, a); err != nil || got.State != protocol.StateCommitted {
		t.Fatalf("get: %+v %v", got, err)
	}

	b := claims.ID{Tenant: "a.b", Source: "gh", Key: "k2"}
	revB := claimOK(t, ctx, st, b, "h4", 30*time.Second)
	if err := st.Release(ctx, b, "h4", revB); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := st.Release(ctx, b, "h4", revB); err == nil {
		t.Fatal("second release succeeded")
	}

	// SettleOwn (the edge's one-write settle) publishes like Settle.
	c3 := claims.ID{Tenant: "a.b", Source: "gh", Key: "k3"}
	revC3 := claimOK(t, ctx, st, c3, "h5", 30*time.Second)
	if err := st.SettleOwn(ctx, c3, "h5", "", revC3, time.Hour); err != nil {
		t.Fatalf("settle own: %v", err)
	}
	if err := st.SettleOwn(ctx, c3, "h5", "", revC3, time.Hour); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("second settle own: %v, want ErrLost", err)
	}

	// SettleOwn with a digest (an Idempotency-Key's settle) publishes like Settle
	// and keeps the digest in the inner store.
	c5 := claims.ID{Tenant: "a.b", Source: "api", Key: "k5"}
	revC5 := claimOK(t, ctx, st, c5, "h7", 30*time.Second)
	if err := st.SettleOwn(ctx, c5, "h7", "sha256:ab", revC5, time.Hour); err != nil {
		t.Fatalf("settle own digest: %v", err)
	}
	if got, err := st.Get(ctx, c5); err != nil || got.State != protocol.StateCommitted || got.Digest != "sha256:ab" {
		t.Fatalf("get c5: %+v %v", got, err)
	}

	// A started claim (the owner's pipelined writes) publishes pending when
	// taken, nothing when the key is held.
	c4 := claims.ID{Tenant: "a.b", Source: "gh", Key: "k4"}
	var r4 claims.Result
	for i, want := range []bool{true, false} { // the second finds the first's claim
		sc, err := st.StartClaim(c4, "h6", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		res, done, err := sc.Wait(ctx)
		if done != want || err != nil || done && res.Outcome != claims.OK {
			t.Fatalf("started claim %d: %+v %v %v, want done %v", i, res, done, err, want)
		}
		if done {
			r4 = res
		}
	}
	// A started settle publishes committed when it lands, nothing when
	// it is refused.
	for i, want := range []bool{true, false} { // the second finds the claim settled
		ss, err := st.StartSettleOwn(c4, "h6", r4.Revision, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if done, err := ss.Wait(ctx); done != want || err != nil {
			t.Fatalf("started settle %d: %v %v, want done %v", i, done, err, want)
		}
	}

	testkit.Eventually(t, 5*time.Second, func() bool {
		return s.count(e.subj.ClaimPending("a.b")) == 5 && s.count(e.subj.ClaimCommitted("a.b")) == 4 &&
			s.count(e.subj.ClaimReleased("a.b")) == 1
	}, "pending x5, committed x4, released")
	// A sentinel published after everything else: once it is seen, nothing
	// else can still be on its way from p.
	p.HookStored("sentinel", "s", "", "h")
	testkit.Eventually(t, 5*time.Second, func() bool { return s.count(e.subj.HookStored("sentinel", "s")) == 1 }, "sentinel")
	if n := s.count(e.subj.ClaimPending("a.b")); n != 5 {
		t.Fatalf("pending events = %d, want 5 (Pending/Duplicate outcomes publish nothing)", n)
	}
	if n := s.count(e.subj.ClaimCommitted("a.b")); n != 4 {
		t.Fatalf("committed events = %d, want 4 (a stale settle publishes nothing)", n)
	}
	if c := s.on(e.subj.ClaimCommitted("a.b"))[2].ev; c.Key != "k5" || c.HookID != "h7" || c.Revision != revC5 {
		t.Fatalf("committed payload of SettleOwn with a digest %+v", c)
	}
	if n := s.count(e.subj.ClaimReleased("a.b")); n != 1 {
		t.Fatalf("released events = %d, want 1", n)
	}
	if c := s.on(e.subj.ClaimCommitted("a.b"))[1].ev; c.Key != "k3" || c.HookID != "h5" || c.Revision != revC3 {
		t.Fatalf("committed payload of SettleOwn %+v", c)
	}
	c := s.on(e.subj.ClaimCommitted("a.b"))[0].ev
	if c.Tenant != "a.b" || c.Source != "gh" || c.Key != "k1" || c.HookID != "h1" || c.Revision != rev {
		t.Fatalf("committed payload %+v", c)
	}
	r := s.on(e.subj.ClaimReleased("a.b"))[0].ev
	if r.Key != "k2" || r.HookID != "h4" || r.Revision != revB {
		t.Fatalf("released payload %+v", r)
	}
}
