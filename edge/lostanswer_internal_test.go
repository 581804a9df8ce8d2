package edge

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// keyedSource dedupes on the X-Event-Id header.
type keyedSource struct{}

func (keyedSource) Source(string, string) (Source, error) {
	return Source{Dedupe: func(h http.Header, _ []byte) (string, bool, bool) {
		k := h.Get("X-Event-Id")
		return k, false, k != ""
	}}, nil
}

// losingAdmitter is an owner whose answers are lost on purpose while lose
// is set: it takes the hit's pending claim in the fleet's claim store, as
// the owner does, then the caller sees ErrUnavailable (the answer did not
// come back in time). Otherwise it answers with the claim it took.
type losingAdmitter struct {
	store claims.Store
	lose  bool
}

func (a *losingAdmitter) Hit(ctx context.Context, r quota.HitRequest) (quota.HitReply, error) {
	c := r.Claim
	res, err := a.store.Claim(ctx, claims.ID{Tenant: c.Tenant, Source: c.Source, Key: c.Key}, c.HookID, time.Duration(c.PendingTTLMs)*time.Millisecond)
	if err != nil {
		return quota.HitReply{}, err
	}
	if a.lose {
		return quota.HitReply{}, fmt.Errorf("%w: the answer was lost", quota.ErrUnavailable)
	}
	switch res.Outcome {
	case claims.OK:
		return quota.HitReply{Result: quota.ResultOK, Revision: res.Revision, HookID: c.HookID}, nil
	case claims.Duplicate:
		return quota.HitReply{Result: quota.ResultDuplicate, HookID: res.HookID}, nil
	default:
		return quota.HitReply{Result: quota.ResultPending, RetryAfterMs: res.RetryAfter.Milliseconds(), HookID: res.HookID}, nil
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
		Policy: keyedSource{}, Admitter: adm, Claims: store, Hooks: &nopStorer{}, PendingTTL: time.Hour,
		Limits: func(string) (Limits, string) {
			return Limits{Hooks: Rate{1000, 1000}, Bytes: Rate{1e9, 1e9}}, OriginDefault
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
	if st, err := store.Get(testkit.Context(t), claims.ID{Tenant: "acme", Source: "src", Key: "evt-1"}); err != nil || st.State != claims.StateAbsent {
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
