package claims_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// replayFixture is one fresh, isolated ReplayStore with its clock and the
// means to let time pass for it (see storeFixture).
type replayFixture struct {
	store  claims.ReplayStore
	now    func() time.Time
	elapse func(d time.Duration)
}

// runReplaySuite runs the ReplayStore conformance suite; newStore builds a
// store holding at most capacity pairs, with no skew.
func runReplaySuite(t *testing.T, newStore func(t *testing.T, capacity int) replayFixture) {
	cases := []struct {
		name     string
		capacity int
		run      func(t *testing.T, f replayFixture)
	}{
		{"ConcurrentSameKey", 100, testReplayConcurrentSameKey},
		{"CapacityOne", 1, testReplayCapacityOne},
		{"ConcurrentDistinctAtCapacityOne", 1, testReplayConcurrentDistinct},
		{"DuplicatesUseNoCapacity", 2, testReplayDuplicatesUseNoCapacity},
		{"NamespacesIndependent", 100, testReplayNamespacesIndependent},
		{"PastRetainUntil", 100, testReplayPastRetainUntil},
		{"DuplicateDoesNotRefresh", 100, testReplayDuplicateDoesNotRefresh},
		{"FarFuture", 100, testReplayFarFuture},
		{"InvalidArguments", 100, testReplayInvalid},
		{"CanceledContext", 100, testReplayCanceled},
		{"Release", 1, testReplayRelease},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t, c.capacity))
		})
	}
}

func replay(t *testing.T, s claims.ReplayStore, ns, key string, until int64) protocol.ReplayOutcome {
	t.Helper()
	o, err := s.Claim(testkit.Context(t), ns, key, until)
	if err != nil {
		t.Fatalf("replay Claim(%q, %q, %d): %v", ns, key, until, err)
	}
	return o
}

func wantReplay(t *testing.T, s claims.ReplayStore, ns, key string, until int64, want protocol.ReplayOutcome) {
	t.Helper()
	if got := replay(t, s, ns, key, until); got != want {
		t.Fatalf("replay Claim(%q, %q, %d) = %v, want %v", ns, key, until, got, want)
	}
}

func countOutcomes(os []protocol.ReplayOutcome) map[protocol.ReplayOutcome]int {
	m := map[protocol.ReplayOutcome]int{}
	for _, o := range os {
		m[o]++
	}
	return m
}

func testReplayConcurrentSameKey(t *testing.T, f replayFixture) {
	ctx, until := testkit.Context(t), f.now().Add(time.Hour).Unix()
	got := countOutcomes(parallel(t, 64, func(int) (protocol.ReplayOutcome, error) {
		return f.store.Claim(ctx, "acme/gh", "msg-1", until)
	}))
	if got[protocol.Claimed] != 1 || got[protocol.AlreadyClaimed] != 63 {
		t.Fatalf("outcomes %v, want 1 claimed and 63 already claimed", got)
	}
}

func testReplayCapacityOne(t *testing.T, f replayFixture) {
	s := f.store
	soon := f.now().Unix() // retained for the 1 s minimum
	later := f.now().Add(time.Hour).Unix()
	wantReplay(t, s, "ns", "one", soon, protocol.Claimed)
	wantReplay(t, s, "ns", "one", later, protocol.AlreadyClaimed) // even though full
	wantReplay(t, s, "ns", "two", later, protocol.Full)
	f.elapse(2 * time.Second)
	testkit.Eventually(t, waitTTL, func() bool {
		switch o := replay(t, s, "ns", "two", later); o {
		case protocol.Claimed:
			return true
		case protocol.Full:
			return false
		default:
			t.Fatalf("two: %v while one expires", o)
		}
		return false
	}, "one expires and frees its slot")
	wantReplay(t, s, "ns", "two", later, protocol.AlreadyClaimed)
	wantReplay(t, s, "ns", "one", later, protocol.Full)
}

// testReplayRelease: a released pair can be claimed again, and its slot
// comes back (a KV purge marker holds it for up to the marker TTL).
func testReplayRelease(t *testing.T, f replayFixture) {
	s, ctx := f.store, testkit.Context(t)
	later := f.now().Add(time.Hour).Unix()
	wantReplay(t, s, "ns", "one", later, protocol.Claimed)
	if err := s.Release(ctx, "ns", "one"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := s.Release(ctx, "ns", "absent"); err != nil {
		t.Fatalf("Release of an absent pair: %v", err)
	}
	testkit.Eventually(t, waitTTL, func() bool {
		return replay(t, s, "ns", "one", later) == protocol.Claimed
	}, "released pair claimed again")
	wantReplay(t, s, "ns", "one", later, protocol.AlreadyClaimed)
	if err := s.Release(ctx, "", "x"); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("Release with an empty namespace: %v", err)
	}
}

func testReplayConcurrentDistinct(t *testing.T, f replayFixture) {
	ctx, until := testkit.Context(t), f.now().Add(time.Hour).Unix()
	got := countOutcomes(parallel(t, 64, func(i int) (protocol.ReplayOutcome, error) {
		return f.store.Claim(ctx, "ns", fmt.Sprintf("k%02d", i), until)
	}))
	if got[protocol.Claimed] != 1 || got[protocol.Full] != 63 {
		t.Fatalf("outcomes %v, want 1 claimed and 63 full", got)
	}
}

func testReplayDuplicatesUseNoCapacity(t *testing.T, f replayFixture) {
	ctx, s, until := testkit.Context(t), f.store, f.now().Add(time.Hour).Unix()
	got := countOutcomes(parallel(t, 8, func(int) (protocol.ReplayOutcome, error) {
		return s.Claim(ctx, "ns", "a", until)
	}))
	if got[protocol.Claimed] != 1 || got[protocol.AlreadyClaimed] != 7 {
		t.Fatalf("outcomes %v, want 1 claimed and 7 already claimed", got)
	}
	wantReplay(t, s, "ns", "a", until, protocol.AlreadyClaimed)
	wantReplay(t, s, "ns", "b", until, protocol.Claimed)
	wantReplay(t, s, "ns", "c", until, protocol.Full)
	wantReplay(t, s, "ns", "a", until, protocol.AlreadyClaimed)
	wantReplay(t, s, "ns", "b", until, protocol.AlreadyClaimed)
}

func testReplayNamespacesIndependent(t *testing.T, f replayFixture) {
	s, until := f.store, f.now().Add(time.Hour).Unix()
	pairs := [][2]string{
		{"a.b", "c"}, {"a", "b.c"}, {"a", "b"}, {"b", "a"}, {"*", ">"}, {">", "*"}, {"a.>", "x"},
		{"=", "="}, {"=2E", "x"}, {".", "x"}, {"\x00", "\xff"}, {"\xff", "\x00"}, {"acme/gh", "m"}, {"acme", "gh/m"},
		{"日本", "キー"}, {strings.Repeat(".", 256), strings.Repeat("\xff", 256)},
	}
	for _, p := range pairs {
		wantReplay(t, s, p[0], p[1], until, protocol.Claimed)
	}
	for _, p := range pairs {
		wantReplay(t, s, p[0], p[1], until, protocol.AlreadyClaimed)
	}
}

func testReplayPastRetainUntil(t *testing.T, f replayFixture) {
	s := f.store
	wantReplay(t, s, "ns", "old", 0, protocol.Claimed)
	wantReplay(t, s, "ns", "old", 0, protocol.AlreadyClaimed)
	f.elapse(2 * time.Second)
	testkit.Eventually(t, waitTTL, func() bool {
		return replay(t, s, "ns", "old", 0) == protocol.Claimed
	}, "a past claim expires after the 1 s minimum")
}

func testReplayDuplicateDoesNotRefresh(t *testing.T, f replayFixture) {
	s := f.store
	wantReplay(t, s, "ns", "k", f.now().Unix(), protocol.Claimed)
	wantReplay(t, s, "ns", "k", f.now().Add(time.Hour).Unix(), protocol.AlreadyClaimed)
	f.elapse(2 * time.Second)
	testkit.Eventually(t, waitTTL, func() bool {
		return replay(t, s, "ns", "k", f.now().Add(time.Hour).Unix()) == protocol.Claimed
	}, "the first retention, not the duplicate's, decides")
}

func testReplayFarFuture(t *testing.T, f replayFixture) {
	wantReplay(t, f.store, "ns", "far", protocol.MaxRetainUntil, protocol.Claimed)
	wantReplay(t, f.store, "ns", "far", protocol.MaxRetainUntil, protocol.AlreadyClaimed)
}

func testReplayInvalid(t *testing.T, f replayFixture) {
	ctx, s, until := testkit.Context(t), f.store, f.now().Add(time.Hour).Unix()
	long := strings.Repeat("n", protocol.MaxNameBytes+1)
	cases := []struct {
		name, ns, key string
		until         int64
	}{
		{"empty namespace", "", "k", until},
		{"empty key", "ns", "", until},
		{"namespace 257 B", long, "k", until},
		{"key 257 B", "ns", long, until},
		{"retain_until -1", "ns", "k", -1},
		{"retain_until past 9999", "ns", "k", protocol.MaxRetainUntil + 1},
	}
	for _, c := range cases {
		if o, err := s.Claim(ctx, c.ns, c.key, c.until); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("%s: %v, %v; want ErrInvalid", c.name, o, err)
		}
	}
	wantReplay(t, s, "ns", "k", until, protocol.Claimed)
	wantReplay(t, s, long[1:], long[1:], until, protocol.Claimed)
}

func testReplayCanceled(t *testing.T, f replayFixture) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.store.Claim(ctx, "ns", "k", f.now().Unix()); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("canceled: %v, want errUnavailable", err)
	}
	wantReplay(t, f.store, "ns", "k", f.now().Add(time.Hour).Unix(), protocol.Claimed)
}
