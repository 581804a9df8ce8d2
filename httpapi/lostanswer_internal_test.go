package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/ownerkit"
)

// headerSource dedupes every source on the header named; idem makes the
// key an idempotency key (a reuse with another body is refused, not a
// duplicate), as Idempotency-Key; otherwise it is a provider's event id.
type headerSource struct {
	header string
	idem   bool
}

func (p headerSource) Source(string, string) (Source, error) {
	return Source{Dedupe: func(h http.Header, _ []byte) (string, bool, bool) {
		k := h.Get(p.header)
		return k, p.idem, k != ""
	}}, nil
}

// keyedSource dedupes on the X-Event-Id header.
var keyedSource = headerSource{header: "X-Event-Id"}

// losingAdmitter is an owner whose answers are lost on purpose while lose
// is set: it takes the hit's pending claim in the fleet's claim store, as
// the owner does, then the caller sees ErrUnavailable (the answer did not
// come back in time). Otherwise it answers with the claim it took.
type losingAdmitter struct {
	store claims.Store
	lose  bool
}

func (a *losingAdmitter) Hit(ctx context.Context, r protocol.HitRequest) (protocol.HitReply, error) {
	c := r.Claim
	res, err := a.store.Claim(ctx, claims.ID{Tenant: c.Tenant, Source: c.Source, Key: c.Key}, c.HookID, time.Duration(c.PendingTTLMs)*time.Millisecond)
	if err != nil {
		return protocol.HitReply{}, err
	}
	if a.lose {
		return protocol.HitReply{}, fmt.Errorf("%w: the answer was lost", protocol.ErrUnavailable)
	}
	switch res.Outcome {
	case claims.OK:
		return protocol.HitReply{Result: protocol.ResultOK, Revision: res.Revision, HookID: c.HookID}, nil
	case claims.Duplicate:
		return protocol.HitReply{Result: protocol.ResultDuplicate, HookID: res.HookID}, nil
	default:
		return protocol.HitReply{Result: protocol.ResultPending, RetryAfterMs: res.RetryAfter.Milliseconds(), HookID: res.HookID}, nil
	}
}

// TestLostAnswerReleasesClaim: a hit whose answer is lost after the owner
// took the pending claim is answered 503, and the claim is released, so
// the sender's retry is accepted at once rather than answered 409 until
// the pending TTL.
func TestLostAnswerReleasesClaim(t *testing.T) {
	k := testkit.New(t)
	store := testkit.ClaimsKV(t, k.Bucket(t, kvstore.BucketConfig{Name: "lost_answer_claims"}))
	adm := &losingAdmitter{store: store, lose: true}
	h, err := New(Config{
		Policy: keyedSource, Admitter: adm, Claims: store, Hooks: &nopStorer{}, PendingTTL: time.Hour,
		Limits: func(string) (Limits, string) {
			return Limits{Hooks: Rate{Rate: 1000, Burst: 1000}, Bytes: Rate{Rate: 1e9, Burst: 1e9}}, OriginDefault
		},
		Gatherer: prometheus.NewRegistry(), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	post := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/hooks/acme/src", strings.NewReader(`{}`))
		r.Header.Set("X-Event-Id", "evt-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := post(); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("lost answer: %d %s, want 503 with Retry-After", w.Code, w.Body)
	}
	if st, err := store.Get(testkit.Context(t), claims.ID{Tenant: "acme", Source: "src", Key: "evt-1"}); err != nil || st.State != protocol.StateAbsent {
		t.Fatalf("the pending claim of the unanswered hit: %+v %v, want none", st, err)
	}
	adm.lose = false
	if w := post(); w.Code != http.StatusAccepted {
		t.Fatalf("the sender's retry: %d %s, want 202 (not 409 until the pending TTL)", w.Code, w.Body)
	}
	if w := post(); w.Code != http.StatusOK {
		t.Fatalf("a redelivery after the accepted retry: %d %s, want 200 duplicate", w.Code, w.Body)
	}
}

// lossyOwner sends hits to a real partition owner (quota.Worker) as its
// JSON owner requests (docs/PROTOCOL.md, the edge's hits) on the
// partition's subject, the way quota's TestNamedSlots loses a reserve's
// answer: while lose is set the owner's reply arrives on an inbox the
// test reads — proof the owner applied the hit — and is dropped, and the
// edge sees ErrUnavailable. While hold is set the request is not sent at
// all yet: it waits in held for the test to deliver it late (an owner
// that writes the claim after the edge gave up and released it).
type lossyOwner struct {
	c      *quota.Router
	nc     *nats.Conn
	prefix string
	parts  int

	mu         sync.Mutex
	lose, hold bool
	held       []protocol.HitRequest
	lostReply  []protocol.HitReply
}

func (o *lossyOwner) set(lose, hold bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lose, o.hold = lose, hold
}

func (o *lossyOwner) Hit(ctx context.Context, r protocol.HitRequest) (protocol.HitReply, error) {
	o.mu.Lock()
	lose, hold := o.lose, o.hold
	if hold {
		o.held = append(o.held, r)
	}
	o.mu.Unlock()
	switch {
	case hold:
		return protocol.HitReply{}, fmt.Errorf("%w: the request is held (a frozen owner)", protocol.ErrUnavailable)
	case lose:
		rep, err := o.deliver(ctx, r)
		if err != nil {
			return protocol.HitReply{}, err
		}
		o.mu.Lock()
		o.lostReply = append(o.lostReply, rep)
		o.mu.Unlock()
		return protocol.HitReply{}, fmt.Errorf("%w: the owner's answer was lost", protocol.ErrUnavailable)
	default:
		return o.c.Hit(ctx, r)
	}
}

// deliver sends r to its partition's owner as a JSON owner request and
// returns the owner's answer, which the edge never sees.
func (o *lossyOwner) deliver(ctx context.Context, r protocol.HitRequest) (protocol.HitReply, error) {
	data, err := json.Marshal(map[string]any{"op": "hit", "hit": r})
	if err != nil {
		return protocol.HitReply{}, err
	}
	subject := fmt.Sprintf("%s.v1.quota.p.%d", o.prefix, quota.Partition(r.Tenant(), o.parts))
	msg, err := o.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data})
	if err != nil {
		return protocol.HitReply{}, err
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); code != "" {
		return protocol.HitReply{}, fmt.Errorf("owner error %s: %s", code, msg.Header.Get("Nats-Service-Error"))
	}
	var rep protocol.HitReply
	return rep, json.Unmarshal(msg.Data, &rep)
}

// deliverHeld sends the held requests to the owner now and returns its
// answers.
func (o *lossyOwner) deliverHeld(t *testing.T) []protocol.HitReply {
	t.Helper()
	o.mu.Lock()
	held := o.held
	o.held = nil
	o.mu.Unlock()
	var reps []protocol.HitReply
	for _, r := range held {
		rep, err := o.deliver(testkit.Context(t), r)
		if err != nil {
			t.Fatalf("late delivery to the owner: %v", err)
		}
		reps = append(reps, rep)
	}
	return reps
}

// TestLostAnswerRealOwner: the answers a real owner sends are lost after
// it applied the hit. A lost answer's release gives back only the lost
// hit's own pending claim: another hook's pending claim and a committed
// key are left as they were (a handler that dropped the key whatever held
// it would let a second hook in). An owner that writes the claim late,
// after the edge released it, holds the key for the pending TTL only
// (409 with Retry-After, then accepted), and a late write after the
// retry was accepted changes nothing.
func TestLostAnswerRealOwner(t *testing.T) {
	k := testkit.New(t)
	store, c := realOwner(t, k)
	ctx := testkit.Context(t)
	prefix, parts := protocol.DefaultPrefix, c.Partitions()
	owner := &lossyOwner{c: c, nc: k.Conn, prefix: prefix, parts: parts}
	handler := func(pendingTTL time.Duration) *Handler {
		h, err := New(Config{
			Policy: keyedSource, Admitter: owner, Claims: store, Hooks: &nopStorer{}, PendingTTL: pendingTTL,
			Limits: func(string) (Limits, string) {
				return Limits{Hooks: Rate{Rate: 1000, Burst: 1000}, Bytes: Rate{Rate: 1e9, Burst: 1e9}}, OriginDefault
			},
			Gatherer: prometheus.NewRegistry(), Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	long, short := handler(time.Hour), handler(2*time.Second)
	post := func(h *Handler, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/hooks/acme/src", strings.NewReader(`{}`))
		r.Header.Set("X-Event-Id", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	get := func(key string) claims.State {
		t.Helper()
		st, err := store.Get(ctx, claims.ID{Tenant: "acme", Source: "src", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	lost := func(h *Handler, key string, want string) {
		t.Helper()
		owner.set(true, false)
		defer owner.set(false, false)
		if rec := post(h, key); rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s, answer lost: %d %s, want 503", key, rec.Code, rec.Body)
		}
		owner.mu.Lock()
		rep := owner.lostReply[len(owner.lostReply)-1]
		owner.mu.Unlock()
		if rep.Result != want {
			t.Fatalf("%s: the owner answered %q (lost), want %q", key, rep.Result, want)
		}
	}

	// The lost hit's own claim: released, the retry accepted at once.
	lost(long, "own", protocol.ResultOK)
	if st := get("own"); st.State != protocol.StateAbsent {
		t.Fatalf("own: the lost hit's claim after its release: %+v, want absent", st)
	}
	if rec := post(long, "own"); rec.Code != http.StatusAccepted {
		t.Fatalf("own: the retry: %d %s, want 202", rec.Code, rec.Body)
	}

	// Another hook's pending claim (its store still in flight) survives.
	other, err := store.Claim(ctx, claims.ID{Tenant: "acme", Source: "src", Key: "other"}, "other-hook-000000001", time.Hour)
	if err != nil || other.Outcome != claims.OK {
		t.Fatalf("another hook's claim: %+v %v", other, err)
	}
	lost(long, "other", protocol.ResultPending)
	if st := get("other"); st.State != protocol.StatePending || st.HookID != "other-hook-000000001" || st.Revision != other.Revision {
		t.Fatalf("another hook's pending claim after a lost answer's release: %+v, want pending for other-hook-000000001 at %d", st, other.Revision)
	}
	if err := store.Settle(ctx, claims.ID{Tenant: "acme", Source: "src", Key: "other"}, "other-hook-000000001", other.Revision, time.Hour); err != nil {
		t.Fatalf("the other hook settles its own claim: %v", err)
	}

	// A committed key survives; a redelivery is still a duplicate.
	if rec := post(long, "done"); rec.Code != http.StatusAccepted {
		t.Fatalf("done: %d %s", rec.Code, rec.Body)
	}
	committed := get("done")
	lost(long, "done", protocol.ResultDuplicate)
	if st := get("done"); st.State != protocol.StateCommitted || st.HookID != committed.HookID || st.Revision != committed.Revision {
		t.Fatalf("a committed key after a lost answer's release: %+v, want %+v", st, committed)
	}
	if rec := post(long, "done"); rec.Code != http.StatusOK || rec.Header().Get("X-Hook-Id") != committed.HookID {
		t.Fatalf("done: a redelivery: %d %s, want 200 duplicate of %s", rec.Code, rec.Body, committed.HookID)
	}

	// The owner writes the claim late, after the edge released it: the key
	// is held for the lost hit's pending TTL (409 with Retry-After, never
	// a second 202 while held), then the retry is accepted.
	owner.set(false, true)
	if rec := post(short, "late"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("late: %d %s, want 503", rec.Code, rec.Body)
	}
	owner.set(false, false)
	if st := get("late"); st.State != protocol.StateAbsent {
		t.Fatalf("late: before the owner's late write: %+v, want absent", st)
	}
	if reps := owner.deliverHeld(t); len(reps) != 1 || reps[0].Result != protocol.ResultOK {
		t.Fatalf("late: the owner's late write: %+v, want one ok", reps)
	}
	lateHolder := get("late")
	if lateHolder.State != protocol.StatePending {
		t.Fatalf("late: after the owner's late write: %+v, want pending", lateHolder)
	}
	rec := post(short, "late")
	if rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("late: the retry while the late claim is held: %d %s, want 409 with Retry-After", rec.Code, rec.Body)
	}
	testkit.Eventually(t, 15*time.Second, func() bool {
		rec := post(short, "late")
		switch rec.Code {
		case http.StatusConflict:
			return false
		case http.StatusAccepted:
			return true
		}
		t.Fatalf("late: a retry: %d %s, want 409 until the pending TTL, then 202", rec.Code, rec.Body)
		return false
	}, "the late claim expires after its pending TTL and the retry is accepted")
	if st := get("late"); st.State != protocol.StateCommitted || st.HookID == lateHolder.HookID {
		t.Fatalf("late: after the accepted retry: %+v, want committed by the retry, not %s", st, lateHolder.HookID)
	}

	// A late write after the retry was accepted changes nothing.
	owner.set(false, true)
	if rec := post(long, "later"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("later: %d %s, want 503", rec.Code, rec.Body)
	}
	owner.set(false, false)
	if rec := post(long, "later"); rec.Code != http.StatusAccepted {
		t.Fatalf("later: the retry: %d %s, want 202", rec.Code, rec.Body)
	}
	retried := get("later")
	if reps := owner.deliverHeld(t); len(reps) != 1 || reps[0].Result != protocol.ResultDuplicate {
		t.Fatalf("later: the owner's late write: %+v, want a duplicate", reps)
	}
	if st := get("later"); st.State != protocol.StateCommitted || st.HookID != retried.HookID || st.Revision != retried.Revision {
		t.Fatalf("later: after the late write: %+v, want %+v", st, retried)
	}
}

// realOwner starts a partition owner (quota.Worker, four partitions) on k
// with a claims store of its own and returns the store and a client.
func realOwner(t *testing.T, k *testkit.Kit) (*claims.KV, *quota.Router) {
	t.Helper()
	const parts = 4
	store := testkit.ClaimsKV(t, k.Bucket(t, kvstore.BucketConfig{Name: "real_owner_claims"}))
	_, c := ownerkit.Serving(t, k, store, parts)
	return store, c
}
