package forward_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// downStore is a claims store that does not answer (the hub's, cut off).
type downStore struct{ claims.Store }

func (downStore) Claim(context.Context, claims.ID, string, time.Duration) (claims.Result, error) {
	return claims.Result{}, protocol.ErrUnavailable
}

// A leaf's claims: on the hub while linked, on the leaf while not or
// while the hub's store does not answer; settled where taken.
func TestLeafClaimsRoute(t *testing.T) {
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
	if state(hub, "a") != protocol.StateCommitted || state(local, "a") != protocol.StateAbsent {
		t.Fatalf("a: hub %v, local %v", state(hub, "a"), state(local, "a"))
	}

	// Unlinked, then linked with a hub store that does not answer: on the leaf.
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
		if state(hub, k) != protocol.StateAbsent {
			t.Fatalf("%s reached the hub", k)
		}
	}

	// A key the hub holds is a duplicate at the leaf while linked.
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
	if _, err := l.Get(ctx); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("first: %v", err)
	}
	if _, err := l.Get(ctx); !errors.Is(err, protocol.ErrUnavailable) || opens.Load() != 1 {
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

// budgetStore records the budget a Claim was given.
type budgetStore struct {
	claims.Store
	left atomic.Int64 // time until ctx's deadline at the call, ns
}

func (s *budgetStore) Claim(ctx context.Context, id claims.ID, hookID string, ttl time.Duration) (claims.Result, error) {
	if dl, ok := ctx.Deadline(); ok {
		s.left.Store(int64(time.Until(dl)))
	}
	return s.Store.Claim(ctx, id, hookID, ttl)
}

// A hub whose store is slow to open (a Lazy waiting for an attempt under
// way) or slow to answer takes at most half of the caller's budget: the
// leaf's own claim keeps the other half (it once got what the hub left,
// and a hook under load was answered 503 where a local claim would have
// been taken).
func TestLeafClaimKeepsItsShare(t *testing.T) {
	mem, _ := claims.NewMemory()
	local := &budgetStore{Store: mem}
	hubMem, _ := claims.NewMemory()
	for name, hub := range map[string]func(context.Context) (claims.Store, error){
		"opening": func(ctx context.Context) (claims.Store, error) {
			<-ctx.Done() // the hub's store does not open in time
			return nil, ctx.Err()
		},
		"claiming": func(context.Context) (claims.Store, error) { return slowStore{hubMem}, nil },
	} {
		t.Run(name, func(t *testing.T) {
			c := forward.NewClaims(local, hub, func() bool { return true })
			const budget = 400 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			defer cancel()
			res, err := c.Claim(ctx, claims.ID{Tenant: "t", Source: "s", Key: name}, "h-"+name, time.Minute)
			if err != nil || res.Outcome != claims.OK {
				t.Fatalf("claim: %+v %v", res, err)
			}
			if left := time.Duration(local.left.Load()); left < budget/2-50*time.Millisecond {
				t.Fatalf("the leaf's claim got %v of a %v budget, want about half", left, budget)
			}
		})
	}
}

// slowStore is a hub store whose Claim answers only when ctx ends.
type slowStore struct{ claims.Store }

func (slowStore) Claim(ctx context.Context, _ claims.ID, _ string, _ time.Duration) (claims.Result, error) {
	<-ctx.Done()
	return claims.Result{}, protocol.ErrUnavailable
}
