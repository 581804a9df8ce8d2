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
