package claims_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// TestMemoryExpirySteps pins the in-memory store's time behaviour to the
// nanosecond: TTLs round up to whole seconds and a claim expires exactly
// when its rounded TTL has passed, never before.
func TestMemoryExpirySteps(t *testing.T) {
	type step struct {
		at   time.Duration // since t0
		op   string        // claim, settle, release, get
		hook string
		ttl  time.Duration
		rev  int    // settle/release: the step whose revision to present
		want string // outcome, state, "ok" or "lost"
		left time.Duration
	}
	steps := []step{
		0:  {at: 0, op: "claim", hook: "h1", ttl: 1500 * time.Millisecond, want: "ok"},
		1:  {at: 0, op: "claim", hook: "h2", ttl: time.Second, want: "pending", left: 2 * time.Second},
		2:  {at: 1999 * time.Millisecond, op: "claim", hook: "h2", ttl: time.Second, want: "pending", left: time.Millisecond},
		3:  {at: 1999*time.Millisecond + 999*time.Microsecond, op: "claim", hook: "h2", want: "pending", left: time.Millisecond}, // floor
		4:  {at: 1999*time.Millisecond + 999*time.Microsecond, op: "get", want: "pending", left: time.Microsecond},
		5:  {at: 2 * time.Second, op: "get", want: "absent"},
		6:  {at: 2 * time.Second, op: "settle", hook: "h1", rev: 0, ttl: time.Hour, want: "lost"},
		7:  {at: 2 * time.Second, op: "claim", hook: "h2", ttl: 0, want: "ok"}, // 0 rounds up to 1 s
		8:  {at: 2 * time.Second, op: "settle", hook: "h2", rev: 7, ttl: 10*time.Minute + 1, want: "ok"},
		9:  {at: 2 * time.Second, op: "get", want: "committed", left: 10*time.Minute + time.Second},
		10: {at: 3 * time.Second, op: "claim", hook: "h3", ttl: time.Second, want: "duplicate"}, // outlives the pending TTL
		11: {at: 2*time.Second + 10*time.Minute + 999*time.Millisecond, op: "claim", hook: "h3", want: "duplicate"},
		12: {at: 2*time.Second + 10*time.Minute + time.Second, op: "claim", hook: "h3", ttl: time.Second, want: "ok"},
		13: {at: 2*time.Second + 10*time.Minute + time.Second, op: "release", hook: "h3", rev: 12, want: "ok"},
		14: {at: 2*time.Second + 10*time.Minute + time.Second, op: "get", want: "absent"},
	}
	c := newFakeClock()
	s := newMemory(t, claims.WithClock(c.Now))
	ctx := testkit.Context(t)
	k := id("acme", "gh", "k")
	revs := make([]uint64, len(steps))
	for i, st := range steps {
		c.Advance(t0.Add(st.at).Sub(c.Now()))
		var got string
		var left time.Duration
		switch st.op {
		case "claim":
			r, err := s.Claim(ctx, k, st.hook, st.ttl)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			got, left, revs[i] = r.Outcome.String(), r.RetryAfter, r.Revision
		case "get":
			g, err := s.Get(ctx, k)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			got, left, revs[i] = g.State, g.ExpiresIn, g.Revision
		case "settle", "release":
			var err error
			if st.op == "settle" {
				err = s.Settle(ctx, k, st.hook, revs[st.rev], st.ttl)
			} else {
				err = s.Release(ctx, k, st.hook, revs[st.rev])
			}
			switch {
			case err == nil:
				got = "ok"
			case errors.Is(err, protocol.ErrClaimLost):
				got = "lost"
			default:
				t.Fatalf("step %d: %v", i, err)
			}
		}
		if got != st.want || (st.left != 0 && left != st.left) {
			t.Fatalf("step %d (%s at %v): got %s (%v left), want %s (%v left)", i, st.op, st.at, got, left, st.want, st.left)
		}
	}
}

// TestMemoryEviction pins the capacity policy: expired entries go first,
// then the oldest committed claim; pending claims are never evicted.
func TestMemoryEviction(t *testing.T) {
	c := newFakeClock()
	s := newMemory(t, claims.WithClock(c.Now), claims.WithMaxEntries(3))
	ctx := testkit.Context(t)
	revs := map[string]uint64{}
	claimOK := func(key string, ttl time.Duration) {
		t.Helper()
		r := claimAs(t, s, id("t", "s", key), "h-"+key, ttl, claims.OK, "h-"+key)
		revs[key] = r.Revision
	}
	settle := func(key string) {
		t.Helper()
		if err := s.Settle(ctx, id("t", "s", key), "h-"+key, revs[key], time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	state := func(key string) string { return get(t, s, id("t", "s", key)).State }

	claimOK("a", 30*time.Second)
	claimOK("b", 30*time.Second)
	claimOK("c", 30*time.Second)
	if _, err := s.Claim(ctx, id("t", "s", "d"), "h-d", time.Second); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("full of pending claims: %v, want errUnavailable", err)
	}
	// A taken key is still answered when full.
	claimAs(t, s, id("t", "s", "a"), "x", time.Second, claims.Pending, "h-a")

	settle("b")
	settle("a") // b was committed first: it goes first
	claimOK("d", 30*time.Second)
	if state("b") != protocol.StateAbsent || state("a") != protocol.StateCommitted || state("c") != protocol.StatePending {
		t.Fatalf("after evicting: a=%s b=%s c=%s", state("a"), state("b"), state("c"))
	}

	// c and d expire: they go before the committed a.
	c.Advance(30 * time.Second)
	claimOK("e", time.Minute)
	claimOK("f", time.Minute)
	if state("a") != protocol.StateCommitted || s.Len() != 3 {
		t.Fatalf("a=%s, %d entries", state("a"), s.Len())
	}
	// Now only a is committed: it is evicted for g.
	claimOK("g", time.Minute)
	if state("a") != protocol.StateAbsent {
		t.Fatalf("a=%s, want evicted", state("a"))
	}
	if _, err := s.Claim(ctx, id("t", "s", "h"), "h-h", time.Second); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("full again: %v", err)
	}
	// Releasing makes room.
	if err := s.Release(ctx, id("t", "s", "e"), "h-e", revs["e"]); err != nil {
		t.Fatal(err)
	}
	claimOK("h", time.Minute)
}

func TestMemoryDefaults(t *testing.T) {
	s := newMemory(t, nil)
	claimAs(t, s, id("t", "s", "k"), "h", time.Second, claims.OK, "h")
	// A bad option value is an error, not a silent default.
	for name, o := range map[string]claims.MemOption{"max entries": claims.WithMaxEntries(0), "clock": claims.WithClock(nil)} {
		if _, err := claims.NewMemory(o); !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, o := range map[string]claims.KVOption{"clock": claims.WithClock(nil)} {
		if _, err := claims.NewKV(&kvstore.Bucket{}, o); !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, o := range map[string]claims.KVReplayOption{"clock": claims.WithClock(nil)} {
		if _, err := claims.NewKVReplay(&kvstore.Bucket{}, o); !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("replay %s: %v", name, err)
		}
	}
	for name, o := range map[string]claims.MemReplayOption{"capacity": claims.WithReplayCapacity(0), "clock": claims.WithClock(nil)} {
		if _, err := claims.NewMemoryReplay(o); !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("memory replay %s: %v", name, err)
		}
	}
	if _, err := claims.NewKV(nil); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Errorf("nil bucket: %v", err)
	}
	if _, err := claims.NewKVReplay(nil); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Errorf("replay nil bucket: %v", err)
	}
	r := testkit.Must(claims.NewMemoryReplay(nil))(t)
	wantReplay(t, r, "ns", "k", time.Now().Add(time.Hour).Unix(), protocol.Claimed)
}

func TestMemoryReplaySweep(t *testing.T) {
	c := newFakeClock()
	r := testkit.Must(claims.NewMemoryReplay(claims.WithReplayCapacity(10), claims.WithClock(c.Now)))(t)
	base := t0.Unix()                                       // t0 is base + 0.25 s
	wantReplay(t, r, "ns", "a", base+15, protocol.Claimed)  // kept until base+15
	wantReplay(t, r, "ns", "b", base+110, protocol.Claimed) // base+110
	wantReplay(t, r, "ns", "c", 0, protocol.Claimed)        // past: t0 + 1 s = base+1.25
	steps := []struct {
		now     int64
		removed int
		left    int
	}{
		{base, 0, 3}, {base + 1, 0, 3}, {base + 2, 1, 2}, {base + 14, 0, 2}, {base + 15, 1, 1},
		{base + 15, 0, 1}, {protocol.MaxRetainUntil, 1, 0},
	}
	for i, st := range steps {
		n, err := r.Sweep(st.now)
		if err != nil || n != st.removed || r.Len() != st.left {
			t.Fatalf("step %d: Sweep(%d) = %d, %v; %d left; want %d removed, %d left", i, st.now, n, err, r.Len(), st.removed, st.left)
		}
	}
	for _, bad := range []int64{-1, protocol.MaxRetainUntil + 1} {
		if _, err := r.Sweep(bad); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("Sweep(%d): %v, want ErrInvalid", bad, err)
		}
	}
}

// TestMemoryReplayExpiry: an expired pair frees its slot without a Sweep.
func TestMemoryReplayExpiry(t *testing.T) {
	c := newFakeClock()
	r := testkit.Must(claims.NewMemoryReplay(claims.WithReplayCapacity(1), claims.WithClock(c.Now)))(t)
	base := t0.Unix()
	wantReplay(t, r, "ns", "a", base+10, protocol.Claimed) // kept until base+10
	c.Advance(9*time.Second + 740*time.Millisecond)        // base+9.99
	wantReplay(t, r, "ns", "a", base+1000, protocol.AlreadyClaimed)
	wantReplay(t, r, "ns", "b", base+1000, protocol.Full)
	c.Advance(10 * time.Millisecond) // base+10
	wantReplay(t, r, "ns", "b", base+1000, protocol.Claimed)
	wantReplay(t, r, "ns", "a", base+1000, protocol.Full)
}
