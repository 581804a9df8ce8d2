package claims_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// storeFixture is one fresh, isolated Store and the means to let time pass
// for it.
type storeFixture struct {
	store claims.Store
	// elapse lets d pass for the store. The in-memory store's fake clock
	// jumps by d. The KV store's server owns time, so elapse does nothing
	// and the suite polls (testkit.Eventually) until the server has moved
	// on: every wait in the suite is "elapse, then poll for the condition".
	elapse func(d time.Duration)
}

// waitTTL bounds a poll for a TTL to run out on the server: TTLs of 1-3 s
// expire up to ~0.35 s late, and -race slows everything down.
const waitTTL = 8 * time.Second

const hour = time.Hour

// runStoreSuite runs the Store conformance suite. newStore is called once
// per subtest, so subtests run in parallel without sharing state.
func runStoreSuite(t *testing.T, newStore func(t *testing.T) storeFixture) {
	cases := []struct {
		name string
		run  func(t *testing.T, f storeFixture)
	}{
		{"PendingThenDuplicate", testPendingThenDuplicate},
		{"SameHookIDIdempotent", testSameHookIDIdempotent},
		{"RetryAfterShrinks", testRetryAfterShrinks},
		{"ExpiredPendingClaimableAgain", testExpiredPendingClaimableAgain},
		{"CommittedOutlivesPendingTTL", testCommittedOutlivesPendingTTL},
		{"StaleRevisionLost", testStaleRevisionLost},
		{"OtherHookIDLost", testOtherHookIDLost},
		{"SettleAfterReleaseLost", testSettleAfterReleaseLost},
		{"ConcurrentClaimers", testConcurrentClaimers},
		{"TenantsAndSourcesIndependent", testTenantsAndSourcesIndependent},
		{"LongKeyHashed", testLongKeyHashed},
		{"HostileParts", testHostileParts},
		{"InvalidArguments", testInvalidArguments},
		{"CanceledContext", testCanceledContext},
		{"DigestKept", testDigestKept},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t))
		})
	}
}

func id(tenant, source, key string) claims.ID {
	return claims.ID{Tenant: tenant, Source: source, Key: key}
}

func claim(t *testing.T, s claims.Store, cid claims.ID, hook string, ttl time.Duration) claims.Result {
	t.Helper()
	r, err := s.Claim(testkit.Context(t), cid, hook, ttl)
	if err != nil {
		t.Fatalf("Claim(%q, %s): %v", cid, hook, err)
	}
	return r
}

// claimAs claims cid for hook, which must give outcome o held by holder
// (see wantOutcome), and returns the result.
func claimAs(t *testing.T, s claims.Store, cid claims.ID, hook string, ttl time.Duration, o claims.Outcome, holder string) claims.Result {
	t.Helper()
	r := claim(t, s, cid, hook, ttl)
	wantOutcome(t, r, o, holder)
	return r
}

func wantOutcome(t *testing.T, r claims.Result, o claims.Outcome, hook string) {
	t.Helper()
	if r.Outcome != o || r.HookID != hook || r.Revision == 0 {
		t.Fatalf("result %+v, want %v by %q with a revision", r, o, hook)
	}
}

func get(t *testing.T, s claims.Store, cid claims.ID) claims.State {
	t.Helper()
	st, err := s.Get(testkit.Context(t), cid)
	if err != nil {
		t.Fatalf("Get(%q): %v", cid, err)
	}
	return st
}

func wantState(t *testing.T, st claims.State, state, hook string, rev uint64) {
	t.Helper()
	if st.State != state || st.HookID != hook || (rev != 0 && st.Revision != rev) {
		t.Fatalf("state %+v, want %s by %q at revision %d", st, state, hook, rev)
	}
}

// eventuallyClaim polls Claim until it returns OK for hook (while an
// earlier claim runs out) and returns that result.
func eventuallyClaim(t *testing.T, s claims.Store, cid claims.ID, hook string, ttl time.Duration) claims.Result {
	t.Helper()
	var r claims.Result
	testkit.Eventually(t, waitTTL, func() bool {
		r = claim(t, s, cid, hook, ttl)
		return r.Outcome == claims.OK
	}, fmt.Sprintf("claim %q becomes free", cid))
	return r
}

func testPendingThenDuplicate(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	k := id("acme", "gh", "delivery-1")
	r1 := claimAs(t, s, k, "h1", 30*time.Second, claims.OK, "h1")
	wantState(t, get(t, s, k), protocol.StatePending, "h1", r1.Revision)

	r2 := claimAs(t, s, k, "h2", 30*time.Second, claims.Pending, "h1")
	if r2.Revision != r1.Revision || r2.RetryAfter <= 20*time.Second || r2.RetryAfter > 30*time.Second {
		t.Fatalf("pending result %+v: want revision %d, retry after in (20s, 30s]", r2, r1.Revision)
	}

	if err := s.Settle(ctx, k, "h1", r1.Revision, hour); err != nil {
		t.Fatalf("settle: %v", err)
	}
	r3 := claimAs(t, s, k, "h3", 30*time.Second, claims.Duplicate, "h1")
	if r3.RetryAfter != 0 {
		t.Fatalf("duplicate carries RetryAfter %v", r3.RetryAfter)
	}
	st := get(t, s, k)
	wantState(t, st, protocol.StateCommitted, "h1", r3.Revision)
	if st.Revision == r1.Revision || st.ExpiresIn <= 59*time.Minute || st.ExpiresIn > hour {
		t.Fatalf("committed state %+v: want a new revision and ~1h to live", st)
	}
	wantState(t, get(t, s, id("acme", "gh", "other")), protocol.StateAbsent, "", 0)
}

func testSameHookIDIdempotent(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	k := id("acme", "gh", "retried")
	r1 := claimAs(t, s, k, "h1", 30*time.Second, claims.OK, "h1")
	// The caller timed out and asks again with the same hook id.
	r2 := claimAs(t, s, k, "h1", 30*time.Second, claims.OK, "h1")
	if r2.Revision != r1.Revision {
		t.Fatalf("retried claim at revision %d, want the original %d", r2.Revision, r1.Revision)
	}
	claimAs(t, s, k, "h2", 30*time.Second, claims.Pending, "h1")
	if err := s.Settle(ctx, k, "h1", r2.Revision, hour); err != nil {
		t.Fatal(err)
	}
	// Once committed, even the holder is told it is a duplicate.
	claimAs(t, s, k, "h1", 30*time.Second, claims.Duplicate, "h1")
}

func testRetryAfterShrinks(t *testing.T, f storeFixture) {
	s := f.store
	k := id("acme", "gh", "shrinks")
	claimAs(t, s, k, "h1", 3*time.Second, claims.OK, "h1")
	r1 := claimAs(t, s, k, "h2", 3*time.Second, claims.Pending, "h1")
	if r1.RetryAfter <= 2*time.Second || r1.RetryAfter > 3*time.Second {
		t.Fatalf("first retry after %v, want (2s, 3s]", r1.RetryAfter)
	}
	f.elapse(500 * time.Millisecond)
	testkit.Eventually(t, waitTTL, func() bool {
		r := claim(t, s, k, "h3", 3*time.Second)
		if r.Outcome != claims.Pending || r.HookID != "h1" || r.RetryAfter < time.Millisecond {
			t.Fatalf("while pending: %+v", r)
		}
		return r.RetryAfter <= r1.RetryAfter-400*time.Millisecond
	}, "retry after shrinks by 400ms")
	if st := get(t, s, k); st.ExpiresIn > r1.RetryAfter-400*time.Millisecond {
		t.Fatalf("ExpiresIn %v did not shrink with RetryAfter", st.ExpiresIn)
	}
}

func testExpiredPendingClaimableAgain(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	k := id("acme", "gh", "expires")
	// 300 ms rounds up to 1 s.
	r1 := claimAs(t, s, k, "h1", 300*time.Millisecond, claims.OK, "h1")
	r2 := claimAs(t, s, k, "h2", 300*time.Millisecond, claims.Pending, "h1")
	if r2.RetryAfter <= 300*time.Millisecond || r2.RetryAfter > time.Second {
		t.Fatalf("retry after %v: the TTL must round up to 1s", r2.RetryAfter)
	}
	f.elapse(time.Second)
	r3 := eventuallyClaim(t, s, k, "h2", 30*time.Second)
	if r3.Revision == r1.Revision {
		t.Fatalf("new claim reuses revision %d", r1.Revision)
	}
	wantState(t, get(t, s, k), protocol.StatePending, "h2", r3.Revision)
	if err := s.Settle(ctx, k, "h1", r1.Revision, hour); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("settle of the expired claim: %v, want ErrLost", err)
	}
}

func testCommittedOutlivesPendingTTL(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	k := id("acme", "gh", "committed")
	r1 := claim(t, s, k, "h1", time.Second)
	if err := s.Settle(ctx, k, "h1", r1.Revision, hour); err != nil {
		t.Fatal(err)
	}
	// A witness claimed after k's pending claim: once it has expired, k's
	// pending TTL would have run out too.
	w := id("acme", "gh", "witness")
	claimAs(t, s, w, "w1", time.Second, claims.OK, "w1")
	f.elapse(time.Second)
	eventuallyClaim(t, s, w, "w2", time.Second)
	claimAs(t, s, k, "h2", time.Second, claims.Duplicate, "h1")
	wantState(t, get(t, s, k), protocol.StateCommitted, "h1", 0)
}

func testStaleRevisionLost(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	k := id("acme", "gh", "stale")
	r1 := claim(t, s, k, "h1", 30*time.Second)
	if err := s.Release(ctx, k, "h1", r1.Revision); err != nil {
		t.Fatalf("release: %v", err)
	}
	wantState(t, get(t, s, k), protocol.StateAbsent, "", 0)
	// Release frees the key at once.
	r2 := claimAs(t, s, k, "h1", 30*time.Second, claims.OK, "h1")
	for _, rev := range []uint64{r1.Revision, r2.Revision + 1000} {
		if err := s.Settle(ctx, k, "h1", rev, hour); !errors.Is(err, protocol.ErrClaimLost) {
			t.Fatalf("settle at stale revision %d: %v, want ErrLost", rev, err)
		}
		if err := s.Release(ctx, k, "h1", rev); !errors.Is(err, protocol.ErrClaimLost) {
			t.Fatalf("release at stale revision %d: %v, want ErrLost", rev, err)
		}
	}
	if err := s.Settle(ctx, k, "h1", r2.Revision, hour); err != nil {
		t.Fatalf("settle: %v", err)
	}
	// Settling moved the revision: the pending revision is stale now.
	if err := s.Settle(ctx, k, "h1", r2.Revision, hour); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("second settle: %v, want ErrLost", err)
	}
	if err := s.Release(ctx, k, "h1", r2.Revision); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("release at the pending revision after settle: %v, want ErrLost", err)
	}
	st := get(t, s, k)
	wantState(t, st, protocol.StateCommitted, "h1", 0)
	// Settle needs a pending claim, even at the current revision.
	if err := s.Settle(ctx, k, "h1", st.Revision, hour); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("settle of a committed claim: %v, want ErrLost", err)
	}
	// Release takes a committed claim back.
	if err := s.Release(ctx, k, "h1", st.Revision); err != nil {
		t.Fatalf("release committed: %v", err)
	}
	wantState(t, get(t, s, k), protocol.StateAbsent, "", 0)
}

func testOtherHookIDLost(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	k := id("acme", "gh", "other-hook")
	r := claim(t, s, k, "h1", 30*time.Second)
	if err := s.Settle(ctx, k, "h2", r.Revision, hour); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("settle by another hook: %v, want ErrLost", err)
	}
	if err := s.Release(ctx, k, "h2", r.Revision); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("release by another hook: %v, want ErrLost", err)
	}
	wantState(t, get(t, s, k), protocol.StatePending, "h1", r.Revision)
	if err := s.Settle(ctx, k, "h1", r.Revision, hour); err != nil {
		t.Fatal(err)
	}
	st := get(t, s, k)
	if err := s.Release(ctx, k, "h2", st.Revision); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("release of a committed claim by another hook: %v, want ErrLost", err)
	}
	wantState(t, get(t, s, k), protocol.StateCommitted, "h1", st.Revision)
}

func testSettleAfterReleaseLost(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	k := id("acme", "gh", "released")
	r := claim(t, s, k, "h1", 30*time.Second)
	if err := s.Release(ctx, k, "h1", r.Revision); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, k, "h1", r.Revision, hour); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("settle after release: %v, want ErrLost", err)
	}
	if err := s.Release(ctx, k, "h1", r.Revision); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("second release: %v, want ErrLost", err)
	}
	wantState(t, get(t, s, k), protocol.StateAbsent, "", 0)
}

// parallel runs fn(0..n-1) at once (released together) and collects the
// results.
func parallel[T any](t *testing.T, n int, fn func(i int) (T, error)) []T {
	t.Helper()
	out := make([]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			out[i], errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

func testConcurrentClaimers(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	k := id("acme", "gh", "contended")
	const n = 64
	res := parallel(t, n, func(i int) (claims.Result, error) {
		return s.Claim(ctx, k, fmt.Sprintf("h%02d", i), 30*time.Second)
	})
	var winner claims.Result
	for _, r := range res {
		if r.Outcome == claims.OK {
			if winner.Outcome != 0 {
				t.Fatalf("two winners: %+v and %+v", winner, r)
			}
			winner = r
		}
	}
	if winner.Outcome != claims.OK {
		t.Fatalf("no winner among %+v", res)
	}
	for i, r := range res {
		if r.Outcome == claims.OK {
			continue
		}
		if r.Outcome != claims.Pending || r.HookID != winner.HookID || r.Revision != winner.Revision || r.RetryAfter < time.Millisecond {
			t.Fatalf("claimer %d: %+v, want pending on winner %+v", i, r, winner)
		}
	}
	if err := s.Settle(ctx, k, winner.HookID, winner.Revision, hour); err != nil {
		t.Fatal(err)
	}
	res = parallel(t, n, func(i int) (claims.Result, error) {
		return s.Claim(ctx, k, fmt.Sprintf("late%02d", i), 30*time.Second)
	})
	for i, r := range res {
		if r.Outcome != claims.Duplicate || r.HookID != winner.HookID {
			t.Fatalf("late claimer %d: %+v, want duplicate of %s", i, r, winner.HookID)
		}
	}
}

func testTenantsAndSourcesIndependent(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	ids := []claims.ID{id("t1", "s1", "k"), id("t2", "s1", "k"), id("t1", "s2", "k"), id("t2", "s2", "k")}
	revs := make([]uint64, len(ids))
	for i, k := range ids {
		r := claimAs(t, s, k, fmt.Sprintf("h%d", i), 30*time.Second, claims.OK, fmt.Sprintf("h%d", i))
		revs[i] = r.Revision
	}
	if err := s.Settle(ctx, ids[0], "h0", revs[0], hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, ids[1], "h1", revs[1]); err != nil {
		t.Fatal(err)
	}
	wantState(t, get(t, s, ids[0]), protocol.StateCommitted, "h0", 0)
	wantState(t, get(t, s, ids[1]), protocol.StateAbsent, "", 0)
	wantState(t, get(t, s, ids[2]), protocol.StatePending, "h2", revs[2])
	wantState(t, get(t, s, ids[3]), protocol.StatePending, "h3", revs[3])
}

func testLongKeyHashed(t *testing.T, f storeFixture) {
	s := f.store
	long := strings.Repeat("k", claims.MaxKeyBytes+1)
	atLimit := strings.Repeat("k", claims.MaxKeyBytes)
	claimAs(t, s, id("acme", "gh", long), "h1", 30*time.Second, claims.OK, "h1")
	// The wire contract makes the hashed form and the long key one claim.
	hashed := claims.NormalizeKey(long)
	if !strings.HasPrefix(hashed, "sha256:") || len(hashed) != len("sha256:")+64 {
		t.Fatalf("NormalizeKey = %q", hashed)
	}
	claimAs(t, s, id("acme", "gh", hashed), "h2", 30*time.Second, claims.Pending, "h1")
	claimAs(t, s, id("acme", "gh", atLimit), "h3", 30*time.Second, claims.OK, "h3")
	claimAs(t, s, id("acme", "gh", long+"x"), "h4", 30*time.Second, claims.OK, "h4")
	wantState(t, get(t, s, id("acme", "gh", long)), protocol.StatePending, "h1", 0)
}

// hostileIDs are pairwise distinct IDs built to collide or escape under a
// naive key scheme.
func hostileIDs() []claims.ID {
	tenK := strings.Repeat("k", 10<<10)
	return []claims.ID{
		id("a.b", "c", "k"), id("a", "b.c", "k"), id("a", "b", "c.k"), id("a.b.c", "k", "k"),
		id("a", "b", "c"), id("a.", "b", "c"), id("a", ".b", "c"),
		id("a.>", "s", "k"), id("a", ">", "k"), id("a", "*", "k"), id("*", ">", ">"), id(">", "*", "*"),
		id("=", "=", "="), id("=2E", "s", "k"), id(".", "s", "k"), id("=3D", "s", "k"),
		id("t\x00", "s", "k"), id("t", "\x00s", "k"), id("t", "s", "\x00"), id("t", "s", "\x00\x00"),
		id("日本", "ソース", "キー"), id("é", "s", "k"), id("e\u0301", "s", "k"), id("\xff\xfe", "s", "k"),
		id(" ", "\t", "\n"), id("a b", "s", "k"), id("$KV", "s", "k"), id("t", "s", "../../x"),
		id("t", "s", "$JS.API.>"), id("t", "s", "sha256:"+strings.Repeat("0", 64)),
		id("t", "s", tenK), id("t", "s", tenK+"x"),
		id(strings.Repeat("\xff", protocol.MaxNameBytes), strings.Repeat(".", protocol.MaxNameBytes), strings.Repeat(">", claims.MaxKeyBytes)),
		id(strings.Repeat(".", protocol.MaxNameBytes), strings.Repeat("\xff", protocol.MaxNameBytes), strings.Repeat("*", claims.MaxKeyBytes)),
	}
}

func testHostileParts(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	ids := hostileIDs()
	res := parallel(t, len(ids), func(i int) (claims.Result, error) {
		return s.Claim(ctx, ids[i], fmt.Sprintf("h%02d", i), 30*time.Second)
	})
	for i, r := range res {
		wantOutcome(t, r, claims.OK, fmt.Sprintf("h%02d", i))
	}
	for i, k := range ids {
		if i%2 == 0 {
			if err := s.Settle(ctx, k, fmt.Sprintf("h%02d", i), res[i].Revision, hour); err != nil {
				t.Fatalf("settle %d: %v", i, err)
			}
		}
	}
	for i, k := range ids {
		want := protocol.StatePending
		if i%2 == 0 {
			want = protocol.StateCommitted
		}
		wantState(t, get(t, s, k), want, fmt.Sprintf("h%02d", i), 0)
	}
}

func testInvalidArguments(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	ok := id("acme", "gh", "k")
	badIDs := map[string]claims.ID{
		"empty tenant":  id("", "gh", "k"),
		"empty source":  id("acme", "", "k"),
		"empty key":     id("acme", "gh", ""),
		"tenant 257 B":  id(strings.Repeat("t", protocol.MaxNameBytes+1), "gh", "k"),
		"source 257 B":  id("acme", strings.Repeat("s", protocol.MaxNameBytes+1), "k"),
		"tenant 10 KB":  id(strings.Repeat(".", 10<<10), "gh", "k"),
		"all empty":     {},
		"source 10 KB ": id("acme", strings.Repeat(">", 10<<10), "k"),
	}
	for name, bad := range badIDs {
		if _, err := s.Claim(ctx, bad, "h", time.Second); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("%s: Claim: %v", name, err)
		}
		if err := s.Settle(ctx, bad, "h", 1, time.Second); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("%s: Settle: %v", name, err)
		}
		if err := s.Release(ctx, bad, "h", 1); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("%s: Release: %v", name, err)
		}
		if _, err := s.Get(ctx, bad); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("%s: Get: %v", name, err)
		}
	}
	for name, hook := range map[string]string{"empty": "", "257 B": strings.Repeat("h", protocol.MaxHookIDBytes+1), "not UTF-8": "h\xff"} {
		if _, err := s.Claim(ctx, ok, hook, time.Second); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("hook %s: Claim: %v", name, err)
		}
		if err := s.Settle(ctx, ok, hook, 1, time.Second); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("hook %s: Settle: %v", name, err)
		}
		if err := s.Release(ctx, ok, hook, 1); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("hook %s: Release: %v", name, err)
		}
	}
	if _, err := s.Claim(ctx, ok, "h", -time.Second); !errors.Is(err, protocol.ErrInvalid) {
		t.Errorf("negative pending TTL: %v", err)
	}
	if err := s.Settle(ctx, ok, "h", 0, time.Second); !errors.Is(err, protocol.ErrInvalid) {
		t.Errorf("settle revision 0: %v", err)
	}
	if err := s.Settle(ctx, ok, "h", 1, -time.Second); !errors.Is(err, protocol.ErrInvalid) {
		t.Errorf("settle negative TTL: %v", err)
	}
	if err := s.Release(ctx, ok, "h", 0); !errors.Is(err, protocol.ErrInvalid) {
		t.Errorf("release revision 0: %v", err)
	}
	// Nothing was written.
	wantState(t, get(t, s, ok), protocol.StateAbsent, "", 0)
}

func testCanceledContext(t *testing.T, f storeFixture) {
	s := f.store
	k := id("acme", "gh", "ctx")
	r := claim(t, s, k, "h1", 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Claim(ctx, id("acme", "gh", "ctx2"), "h1", time.Second); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Claim: %v", err)
	}
	if err := s.Settle(ctx, k, "h1", r.Revision, hour); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Settle: %v", err)
	}
	if err := s.Release(ctx, k, "h1", r.Revision); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Release: %v", err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, protocol.ErrUnavailable) {
		t.Errorf("Get: %v", err)
	}
	wantState(t, get(t, s, k), protocol.StatePending, "h1", r.Revision)
}

// wantDigest polls Get (a replica may lag the settle on R3) until the
// claim on k is committed by hook with digest.
func wantDigest(t *testing.T, s claims.Store, k claims.ID, hook, digest string) claims.State {
	t.Helper()
	var st claims.State
	testkit.Eventually(t, waitTTL, func() bool {
		st = get(t, s, k)
		return st.State == protocol.StateCommitted
	}, fmt.Sprintf("claim %q committed", k))
	if st.HookID != hook || st.Digest != digest {
		t.Fatalf("committed state %+v, want hook %q with digest %q", st, hook, digest)
	}
	return st
}

// testDigestKept: a claim settled with SettleOwn and a digest keeps the digest
// until it is released; one settled without a digest (or by Settle) reads
// back without one; a malformed digest is protocol.ErrInvalid and writes nothing.
func testDigestKept(t *testing.T, f storeFixture) {
	ctx, s := testkit.Context(t), f.store
	d1 := "sha256:" + strings.Repeat("ab", 32)
	k := id("acme", "api", "idem-1")
	r1 := claim(t, s, k, "h1", time.Minute)
	wantState(t, get(t, s, k), protocol.StatePending, "h1", r1.Revision)
	if st := get(t, s, k); st.Digest != "" {
		t.Fatalf("pending claim has digest %q", st.Digest)
	}
	if err := s.SettleOwn(ctx, k, "h1", d1, r1.Revision, hour); err != nil {
		t.Fatalf("SettleOwn: %v", err)
	}
	claimAs(t, s, k, "h2", time.Minute, claims.Duplicate, "h1")
	st := wantDigest(t, s, k, "h1", d1)
	// A second settle of the committed claim is lost, and changes nothing.
	if err := s.SettleOwn(ctx, k, "h1", "sha256:other", r1.Revision, hour); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("second SettleOwn: %v, want ErrLost", err)
	}
	wantDigest(t, s, k, "h1", d1)

	// Released and taken again: the new claim knows nothing of the old
	// digest, and a settle without one keeps none.
	if err := s.Release(ctx, k, "h1", st.Revision); err != nil {
		t.Fatalf("release: %v", err)
	}
	r3 := eventuallyClaim(t, s, k, "h3", time.Minute)
	if err := s.SettleOwn(ctx, k, "h3", "", r3.Revision, hour); err != nil {
		t.Fatalf("SettleOwn without a digest: %v", err)
	}
	wantDigest(t, s, k, "h3", "")
	k2 := id("acme", "api", "idem-2")
	r4 := claim(t, s, k2, "h4", time.Minute)
	if err := s.Settle(ctx, k2, "h4", r4.Revision, hour); err != nil {
		t.Fatal(err)
	}
	wantDigest(t, s, k2, "h4", "")

	k3 := id("acme", "api", "idem-3")
	r5 := claim(t, s, k3, "h5", time.Minute)
	for name, bad := range map[string]string{
		"129 B": strings.Repeat("d", claims.MaxDigestBytes+1), "space": "sha256:a b",
		"newline": "sha256:a\n", "non-ASCII": "sha256:\u00e9", "control": "\x00",
	} {
		if err := s.SettleOwn(ctx, k3, "h5", bad, r5.Revision, hour); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("digest %s: %v, want ErrInvalid", name, err)
		}
	}
	wantState(t, get(t, s, k3), protocol.StatePending, "h5", r5.Revision)
	longest := strings.Repeat("d", claims.MaxDigestBytes)
	if err := s.SettleOwn(ctx, k3, "h5", longest, r5.Revision, hour); err != nil {
		t.Fatalf("a %d-byte digest: %v", claims.MaxDigestBytes, err)
	}
	wantDigest(t, s, k3, "h5", longest)
}
