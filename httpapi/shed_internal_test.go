package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

type anySource struct{}

func (anySource) Source(string, string) (Source, error) { return Source{}, nil }

// heldAdmitter admits every hit once release is closed (the hits in flight
// until then), counting them: a narrow seam standing for an owner that is
// slow under load.
type heldAdmitter struct {
	release chan struct{}
	calls   atomic.Int64
}

func (a *heldAdmitter) Hit(ctx context.Context, _ protocol.HitRequest) (protocol.HitReply, error) {
	a.calls.Add(1)
	select {
	case <-a.release:
		return protocol.HitReply{Result: protocol.ResultOK}, nil
	case <-ctx.Done():
		return protocol.HitReply{}, ctx.Err()
	}
}

// readFlag is a request body that records whether anything read it.
type readFlag struct {
	r    *strings.Reader
	read atomic.Bool
}

func newReadFlag(body string) *readFlag { return &readFlag{r: strings.NewReader(body)} }

func (b *readFlag) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.r.Read(p)
}

type nopStorer struct{ n atomic.Int64 }

func (s *nopStorer) Store(context.Context, hooks.Hook) (uint64, error) {
	return uint64(s.n.Add(1)), nil
}

// TestShedsBeyondMaxInFlight: with MaxInFlight hooks in flight, one more
// is answered 503 overloaded with Retry-After at once — before its body is
// read or anything is charged — and served again once a slot frees.
func TestShedsBeyondMaxInFlight(t *testing.T) {
	const max = 4
	adm := &heldAdmitter{release: make(chan struct{})}
	mem, err := claims.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	store := &nopStorer{}
	h, err := New(Config{
		Policy: anySource{}, Admitter: adm, Claims: mem, Hooks: store, MaxInFlight: max,
		Limits: func(string) (Limits, string) {
			return Limits{Hooks: Rate{Rate: 1000, Burst: 1000}, Bytes: Rate{Rate: 1e9, Burst: 1e9}}, OriginDefault
		},
		StoreTimeout: 10 * time.Second, Gatherer: prometheus.NewRegistry(), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each body records whether it was read: the shed one must never be.
	post := func(body *readFlag) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/hooks/acme/src", body))
		return w
	}
	var wg sync.WaitGroup
	codes := make([]int, max)
	bodies := make([]*readFlag, max)
	for i := range max {
		bodies[i] = newReadFlag(`{}`)
		wg.Go(func() { codes[i] = post(bodies[i]).Code })
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return adm.calls.Load() == max }, "hooks in flight")
	start := time.Now()
	shed := make(chan *httptest.ResponseRecorder, 1)
	shedBody := newReadFlag(`{}`)
	go func() { shed <- post(shedBody) }()
	var w *httptest.ResponseRecorder
	select {
	case w = <-shed:
	case <-time.After(2 * time.Second):
		close(adm.release) // let everything finish before failing
		wg.Wait()
		<-shed
		t.Fatal("a hook beyond the bound waited for a slot instead of 503 at once")
	}
	if took := time.Since(start); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" ||
		!strings.Contains(w.Body.String(), `"overloaded"`) || took > time.Second {
		t.Fatalf("beyond the bound: %d %q %s after %v, want 503 overloaded with Retry-After at once", w.Code, w.Header().Get("Retry-After"), w.Body, took)
	}
	if adm.calls.Load() != max {
		t.Fatalf("the shed hook was charged: %d hits", adm.calls.Load())
	}
	if shedBody.read.Load() {
		t.Fatal("the shed hook's body was read: the shed must come before any work")
	}
	close(adm.release)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusAccepted {
			t.Fatalf("hook %d in flight answered %d", i, c)
		}
		if !bodies[i].read.Load() {
			t.Fatalf("hook %d was accepted without its body read: the probe cannot tell", i)
		}
	}
	if w := post(newReadFlag(`{}`)); w.Code != http.StatusAccepted {
		t.Fatalf("after the slots freed: %d %s", w.Code, w.Body)
	}
	if store.n.Load() != max+1 {
		t.Fatalf("stored %d hooks, want %d", store.n.Load(), max+1)
	}
}
