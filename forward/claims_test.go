package forward_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/testkit"
)

// downStore is a claims store that does not answer (the hub's, cut off).
type downStore struct{ claims.Store }

func (downStore) Claim(context.Context, claims.ID, string, time.Duration) (claims.Result, error) {
	return claims.Result{}, claims.ErrUnavailable
}

// An edge's claims: on the hub while linked, on the edge while not or
// while the hub's store does not answer; settled where taken.
func TestEdgeClaimsRoute(t *testing.T) {
	ctx := context.Background()
	local, _ := claims.NewMemory()
	hub, _ := claims.NewMemory()
	var linked, down atomic.Bool
	linked.Store(true)
	c := forward.NewClaims(local, func(context.Context) (claims.Store, error) {
		if down.Load() {
			return downStore{hub}, nil
		}
		return hub, nil
	}, linked.Load)
	id := func(k string) claims.ID { return claims.ID{Tenant: "t", Source: "s", Key: k} }
	state := func(s claims.Store, k string) string {
		st, err := s.Get(ctx, id(k))
		if err != nil {
			t.Fatal(err)
		}
		return st.State
	}

	// Linked: the hub holds the claim, and its settle goes there too even
	// when the link drops in between.
	res, err := c.Claim(ctx, id("a"), "h-a", time.Minute)
	if err != nil || res.Outcome != claims.OK {
		t.Fatalf("claim a: %+v %v", res, err)
	}
	linked.Store(false)
	if err := c.SettleOwn(ctx, id("a"), "h-a", "", res.Revision, time.Hour); err != nil {
		t.Fatal(err)
	}
	if state(hub, "a") != claims.StateCommitted || state(local, "a") != claims.StateAbsent {
		t.Fatalf("a: hub %v, local %v", state(hub, "a"), state(local, "a"))
	}

	// Unlinked, then linked with a hub store that does not answer: on the edge.
	for i, k := range []string{"b", "c"} {
		if i == 1 {
			linked.Store(true)
			down.Store(true)
		}
		res, err := c.Claim(ctx, id(k), "h-"+k, time.Minute)
		if err != nil || res.Outcome != claims.OK {
			t.Fatalf("claim %s: %+v %v", k, res, err)
		}
		if err := c.Release(ctx, id(k), "h-"+k, res.Revision); err != nil {
			t.Fatalf("release %s where it was taken: %v", k, err)
		}
		if state(hub, k) != claims.StateAbsent {
			t.Fatalf("%s reached the hub", k)
		}
	}

	// A key the hub holds is a duplicate at the edge while linked.
	down.Store(false)
	res, err = c.Claim(ctx, id("a"), "h-other", time.Minute)
	if err != nil || res.Outcome != claims.Duplicate || res.HookID != "h-a" {
		t.Fatalf("a again: %+v %v", res, err)
	}
}

// Lazy: an open that fails is tried again after its pause, one that
// succeeds is kept.
func TestLazyOpens(t *testing.T) {
	var opens atomic.Int32
	fail := true
	store, _ := claims.NewMemory()
	l := forward.NewLazy(func(context.Context) (claims.Store, error) {
		opens.Add(1)
		if fail {
			return nil, errors.New("hub away")
		}
		return store, nil
	})
	ctx := context.Background()
	if _, err := l.Get(ctx); !errors.Is(err, claims.ErrUnavailable) {
		t.Fatalf("first: %v", err)
	}
	if _, err := l.Get(ctx); !errors.Is(err, claims.ErrUnavailable) || opens.Load() != 1 {
		t.Fatalf("at once again: %v after %d opens (want the last error, no new attempt)", err, opens.Load())
	}
	fail = false
	var s claims.Store
	testkit.Eventually(t, 2*time.Second, func() bool {
		var err error
		s, err = l.Get(ctx)
		return err == nil
	}, "reopened after the pause")
	if s != claims.Store(store) {
		t.Fatal("another store")
	}
	n := opens.Load()
	if _, err := l.Get(ctx); err != nil || opens.Load() != n {
		t.Fatalf("kept store: %v, %d opens", err, opens.Load())
	}
}
