package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
)

// TestReadyGauge: sluice_edge_ready says what /readyz answers, 1 with 200
// and 0 with 503, as readiness changes.
func TestReadyGauge(t *testing.T) {
	mem, err := claims.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	reg := prometheus.NewRegistry()
	h, err := New(Config{
		Policy: anySource{}, Admitter: &heldAdmitter{}, Claims: mem, Hooks: &nopStorer{},
		Limits: func(string) (Limits, string) { return Limits{}, OriginDefault },
		Ready: func() error {
			if down.Load() {
				return errors.New("nats not connected")
			}
			return nil
		},
		Gatherer: reg, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		down  bool
		code  int
		gauge float64
	}{{false, 200, 1}, {true, 503, 0}, {false, 200, 1}} {
		down.Store(c.down)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := -1.0
		for _, mf := range mfs {
			if mf.GetName() == "sluice_edge_ready" {
				got = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		if w.Code != c.code || got != c.gauge {
			t.Fatalf("unready=%v: /readyz %d, sluice_edge_ready %v; want %d and %v", c.down, w.Code, got, c.code, c.gauge)
		}
	}
}
