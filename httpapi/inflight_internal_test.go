package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/testkit"
)

// heldStorer holds the first Store until release is closed, and says
// when it arrived: a narrow seam standing for a slow hooks stream.
type heldStorer struct {
	arrived chan struct{}
	release chan struct{}
	nopStorer
}

func (s *heldStorer) Store(ctx context.Context, h hooks.Hook) (uint64, error) {
	if s.n.Load() > 0 {
		return s.nopStorer.Store(ctx, h)
	}
	s.arrived <- struct{}{}
	select {
	case <-s.release:
		return s.nopStorer.Store(ctx, h)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// TestIdempotencyKeyInFlight: an Idempotency-Key reused with another body
// while the first request is still being stored (its claim pending at a
// real owner) is answered 409 in_flight with Retry-After — neither accepted
// nor a duplicate — and once the first is stored, the other body is 422 and
// the same body 200 duplicate.
func TestIdempotencyKeyInFlight(t *testing.T) {
	k := testkit.New(t)
	store, c := realOwner(t, k)
	hooks := &heldStorer{arrived: make(chan struct{}, 1), release: make(chan struct{})}
	h, err := New(Config{
		Policy: headerSource{header: "Idempotency-Key", idem: true}, Admitter: c, Claims: store, Hooks: hooks, PendingTTL: time.Hour,
		Limits: func(string) (Limits, string) {
			return Limits{Hooks: Rate{Rate: 1000, Burst: 1000}, Bytes: Rate{Rate: 1e9, Burst: 1e9}}, OriginDefault
		},
		Gatherer: prometheus.NewRegistry(), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/hooks/acme/api", bytes.NewReader([]byte(body)))
		r.Header.Set("Idempotency-Key", "order-17")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- post(`{"amount":10}`) }()
	select {
	case <-hooks.arrived: // the first holds its pending claim, being stored
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the store")
	}
	rec := post(`{"amount":99}`)
	if rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") == "" || !bytes.Contains(rec.Body.Bytes(), []byte("in_flight")) {
		t.Fatalf("another body while the first is in flight: %d %s, want 409 in_flight with Retry-After", rec.Code, rec.Body)
	}
	close(hooks.release)
	if rec := <-first; rec.Code != http.StatusAccepted {
		t.Fatalf("the first request: %d %s", rec.Code, rec.Body)
	}
	if rec := post(`{"amount":99}`); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("another body after the first was stored: %d %s, want 422", rec.Code, rec.Body)
	}
	if rec := post(`{"amount":10}`); rec.Code != http.StatusOK {
		t.Fatalf("the same body after the first was stored: %d %s, want 200 duplicate", rec.Code, rec.Body)
	}
}
