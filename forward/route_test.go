package forward_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/protocol"
)

// TestRouteOptions: a bad option or a missing function is an error
// wrapping protocol.ErrInvalidOption; without WithPartitions the leaf expects the
// default count, and WithPartitions overrides it.
func TestRouteOptions(t *testing.T) {
	linked := func() bool { return true }
	count := func(n int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { return n, nil }
	}
	if _, err := forward.NewRoute(linked, count(1), forward.WithPartitions(0)); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Errorf("zero partitions: %v, want errInvalidOption", err)
	}
	if _, err := forward.NewRoute(nil, count(1)); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Errorf("nil linked: %v", err)
	}

	r, err := forward.NewRoute(linked, count(protocol.DefaultPartitions))
	if err != nil {
		t.Fatal(err)
	}
	r.Check(context.Background())
	if r.State() != forward.RouteHub || !r.Reachable() {
		t.Fatalf("default partitions against a hub of %d: %q", protocol.DefaultPartitions, r.State())
	}

	reg := prometheus.NewRegistry()
	r, err = forward.NewRoute(linked, count(protocol.DefaultPartitions), forward.WithPartitions(8), forward.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	r.Check(context.Background())
	if r.Reachable() || !strings.Contains(r.State(), "this leaf 8") {
		t.Fatalf("8 partitions against %d: reachable %v, %q", protocol.DefaultPartitions, r.Reachable(), r.State())
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "sluice_edge_hub_quota" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Fatalf("registered: %v, %v", mfs, err)
	}
}
