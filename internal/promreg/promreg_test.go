package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	newVec := func(help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: help}, []string{"l"})
	}
	a, err := Register(reg, newVec("h"))
	if err != nil {
		t.Fatal(err)
	}
	// An equal collector is shared.
	b, err := Register(reg, newVec("h"))
	if err != nil || b != a {
		t.Fatalf("second registration: %v, shared %v", err, b == a)
	}
	// A clashing one is an error, not a panic.
	if _, err := Register(reg, newVec("other help")); err == nil {
		t.Fatal("a clashing collector registered")
	}
	// No registerer: nothing registered.
	c := newVec("h")
	if got, err := Register(nil, c); err != nil || got != c {
		t.Fatalf("nil registerer: %v", err)
	}
}

// TestSet: a Set names its metrics sluice_<subsystem>_<name>, shares an
// equal collector a second Set registered, and keeps the first clash for
// Err while still handing out a usable collector.
func TestSet(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewSet(reg, "test")
	c := s.CounterVec("ops_total", "Ops.", "op")
	s.Gauge("level", "Level.").Set(2)
	s.Histogram("seconds", "Latency.", []float64{1})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	again := NewSet(reg, "test")
	if got := again.CounterVec("ops_total", "Ops.", "op"); got != c || again.Err() != nil {
		t.Fatalf("an equal collector is not shared: %v", again.Err())
	}
	clash := NewSet(reg, "test")
	g := clash.Gauge("ops_total", "Another help.")
	if clash.Err() == nil || g == nil {
		t.Fatalf("a clash: err %v, collector %v", clash.Err(), g)
	}
	g.Inc() // usable, not registered
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"sluice_test_level", "sluice_test_seconds"} {
		if !names[n] {
			t.Errorf("%s not registered (have %v)", n, names)
		}
	}
}

// TestZero: every combination of the values is a series at 0 on a
// gather, and nothing else.
func TestZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewSet(reg, "test")
	c := s.CounterVec("things_total", "Things.", "op", "result")
	Zero(c, []string{"a", "b"}, []string{"ok", "failed", "late"})
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather: %d families, %v", len(mfs), err)
	}
	got := map[string]float64{}
	for _, m := range mfs[0].GetMetric() {
		got[m.GetLabel()[0].GetValue()+"/"+m.GetLabel()[1].GetValue()] = m.GetCounter().GetValue()
	}
	if len(got) != 6 {
		t.Fatalf("series %v, want the 6 combinations", got)
	}
	for _, op := range []string{"a", "b"} {
		for _, r := range []string{"ok", "failed", "late"} {
			if v, ok := got[op+"/"+r]; !ok || v != 0 {
				t.Errorf("%s/%s: %v %v, want 0", op, r, v, ok)
			}
		}
	}
}
