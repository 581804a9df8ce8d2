package cooldown_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/cooldown"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock in Unix milliseconds.
type fakeClock struct{ ms atomic.Int64 }

func newClock(ms int64) *fakeClock {
	c := &fakeClock{}
	c.ms.Store(ms)
	return c
}

func (c *fakeClock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

func i64(v int64) *int64 { return &v }

// env is a kit with the cooldown bucket opened on it.
type env struct {
	t      testing.TB
	kit    *testkit.Kit
	bucket *kvstore.Bucket
}

func newEnv(t *testing.T) *env {
	t.Helper()
	kit := testkit.New(t)
	return &env{t: t, kit: kit, bucket: kit.Bucket(t, cooldown.BucketConfig("t", 1))}
}

// parallelEnv is the start of most tests here: the test runs in
// parallel, on an env of its own, from t0, the wall clock now in Unix ms.
func parallelEnv(t *testing.T) (*env, int64) {
	t.Helper()
	t.Parallel()
	return newEnv(t), time.Now().UnixMilli()
}

// newStore is cooldown.New failing the test on an error.
func newStore(t testing.TB, b *kvstore.Bucket, opts ...cooldown.Option) *cooldown.Store {
	t.Helper()
	return testkit.Must(cooldown.New(b, opts...))(t)
}

// testBudget replaces the 250 ms default in tests that expect the shared
// store to answer: a loaded CI machine running -race must not turn a slow
// answer into a node-local one. Tests of the fallback set their own.
var testBudget = cooldown.WithBudget(5 * time.Second)

// store is a new Store (with its own, empty node-local state) on the bucket.
func (e *env) store(opts ...cooldown.Option) *cooldown.Store {
	return newStore(e.t, e.bucket, append([]cooldown.Option{testBudget}, opts...)...)
}

// secondBucket opens the same bucket over a second connection, as another
// node would.
func (e *env) secondBucket(t *testing.T) *kvstore.Bucket {
	t.Helper()
	b, err := kvstore.OpenBucket(testkit.Context(t), testkit.JetStream(t, e.kit.Connect(t)), cooldown.BucketConfig("t", 1))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func load(t *testing.T, s *cooldown.Store, account string, backends ...string) []protocol.Entry {
	t.Helper()
	got, err := s.Load(testkit.Context(t), account, backends)
	if err != nil {
		t.Fatalf("load %s %v: %v", account, backends, err)
	}
	if len(got) != len(backends) {
		t.Fatalf("load %v: %d entries", backends, len(got))
	}
	for i, e := range got {
		if e.Backend != backends[i] {
			t.Fatalf("load %v: entry %d is %q", backends, i, e.Backend)
		}
	}
	return got
}

func record(t *testing.T, s *cooldown.Store, r protocol.Reading) {
	t.Helper()
	if err := s.Record(testkit.Context(t), r); err != nil {
		t.Fatalf("record %+v: %v", r, err)
	}
}

func penalize(t *testing.T, s *cooldown.Store, account, backend string, until *int64) {
	t.Helper()
	if err := s.Penalize(testkit.Context(t), account, backend, until); err != nil {
		t.Fatalf("penalize %s/%s: %v", account, backend, err)
	}
}

func eq(p *int64, want *int64) bool {
	if p == nil || want == nil {
		return p == nil && want == nil
	}
	return *p == *want
}

func show(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

func TestLoadEmptyGivesDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := load(t, e.store(), "acct", "a", "b", "c")
	js, err := json.Marshal(protocol.LoadReply{Backends: got})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"backends":[` +
		`{"backend":"a","last_checked_ms":null,"snapshots":[],"penalty_until_ms":null},` +
		`{"backend":"b","last_checked_ms":null,"snapshots":[],"penalty_until_ms":null},` +
		`{"backend":"c","last_checked_ms":null,"snapshots":[],"penalty_until_ms":null}]}`
	if string(js) != want {
		t.Fatalf("got  %s\nwant %s", js, want)
	}
	for _, en := range got {
		if en.Fallback {
			t.Fatalf("entry %q answered locally", en.Backend)
		}
	}
}

func TestReadingClearsReachedPenalty(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Offsets in seconds after t0; the clock stands at t0 so that nothing
	// passes by itself.
	t0 := time.Now().UnixMilli()
	at := func(s int64) int64 { return t0 + s*1000 }
	cases := []struct {
		name        string
		until, obs  int64
		wantPenalty bool
	}{
		{"reading at 600 clears penalty until 500", 500, 600, false},
		{"reading at 500 clears penalty until 500", 500, 500, false},
		{"reading at 400 keeps penalty until 500", 500, 400, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock(t0)
			s := e.store(cooldown.WithClock(clk.Now))
			backend := fmt.Sprintf("b%d", i)
			penalize(t, s, "acct", backend, i64(at(c.until)))
			snaps := []protocol.Snapshot{{Key: "tpm", Label: "tokens/min", Percent: 42.5, ResetsAtMs: at(900), ObservedAtMs: at(c.obs)}}
			record(t, s, protocol.Reading{Account: "acct", Backend: backend, ObservedAtMs: at(c.obs), Snapshots: snaps})
			// Checked through this store and through a fresh one (shared
			// state only).
			for _, st := range []*cooldown.Store{s, e.store(cooldown.WithClock(clk.Now))} {
				got := load(t, st, "acct", backend)[0]
				if got.LastCheckedMs == nil || *got.LastCheckedMs != at(c.obs) || !slices.Equal(got.Snapshots, snaps) {
					t.Fatalf("reading: %+v", got)
				}
				if (got.PenaltyUntilMs != nil) != c.wantPenalty {
					t.Fatalf("penalty = %s, want present=%v", show(got.PenaltyUntilMs), c.wantPenalty)
				}
				if c.wantPenalty && *got.PenaltyUntilMs != at(c.until) {
					t.Fatalf("penalty = %d, want %d", *got.PenaltyUntilMs, at(c.until))
				}
			}
			// Once the clock passes the instant, the penalty is not reported.
			clk.ms.Store(at(c.until))
			if got := load(t, s, "acct", backend)[0]; got.PenaltyUntilMs != nil {
				t.Fatalf("passed penalty reported: %d", *got.PenaltyUntilMs)
			}
		})
	}
}

func TestNewerReadingWinsAndPenalizeReplaces(t *testing.T) {
	e, t0 := parallelEnv(t)
	clk := newClock(t0)
	s := e.store(cooldown.WithClock(clk.Now))
	record(t, s, protocol.Reading{Account: "a", Backend: "b", ObservedAtMs: t0 - 100, Snapshots: []protocol.Snapshot{{Key: "new"}}})
	record(t, s, protocol.Reading{Account: "a", Backend: "b", ObservedAtMs: t0 - 200, Snapshots: []protocol.Snapshot{{Key: "old"}}})
	got := load(t, e.store(cooldown.WithClock(clk.Now)), "a", "b")[0]
	if *got.LastCheckedMs != t0-100 || got.Snapshots[0].Key != "new" {
		t.Fatalf("older reading replaced a newer one: %+v", got)
	}
	penalize(t, s, "a", "b", i64(t0+60_000))
	penalize(t, s, "a", "b", i64(t0+30_000)) // replaces, even though sooner
	if got := load(t, e.store(cooldown.WithClock(clk.Now)), "a", "b")[0]; !eq(got.PenaltyUntilMs, i64(t0+30_000)) {
		t.Fatalf("penalty = %s", show(got.PenaltyUntilMs))
	}
	penalize(t, s, "a", "b", i64(t0-1)) // already passed: clears
	if got := load(t, s, "a", "b")[0]; got.PenaltyUntilMs != nil {
		t.Fatalf("passed penalty kept: %s", show(got.PenaltyUntilMs))
	}
	penalize(t, s, "a", "b", i64(t0+30_000))
	penalize(t, s, "a", "b", nil)
	for _, st := range []*cooldown.Store{s, e.store(cooldown.WithClock(clk.Now))} {
		if got := load(t, st, "a", "b")[0]; got.PenaltyUntilMs != nil || got.LastCheckedMs == nil {
			t.Fatalf("after clear: %+v", got)
		}
	}
}

func TestNarrowerLoadLosesNothing(t *testing.T) {
	e, t0 := parallelEnv(t)
	s := e.store()
	for i, b := range []string{"a", "b", "c"} {
		record(t, s, protocol.Reading{Account: "acct", Backend: b, ObservedAtMs: t0 - int64(i)})
		penalize(t, s, "acct", b, i64(t0+60_000+int64(i)))
	}
	check := func(got []protocol.Entry) {
		t.Helper()
		for i, en := range got {
			if !eq(en.LastCheckedMs, i64(t0-int64(i))) || !eq(en.PenaltyUntilMs, i64(t0+60_000+int64(i))) {
				t.Fatalf("entry %d: %+v", i, en)
			}
		}
	}
	check(load(t, s, "acct", "a", "b", "c"))
	check(load(t, s, "acct", "a"))
	check(load(t, s, "acct", "a", "b", "c"))
	// Duplicates and reordering: one entry per requested backend, in order.
	got := load(t, s, "acct", "c", "a", "c", "zz")
	if *got[0].LastCheckedMs != t0-2 || *got[1].LastCheckedMs != t0 || *got[2].LastCheckedMs != t0-2 || got[3].LastCheckedMs != nil {
		t.Fatalf("order: %+v", got)
	}
	// The same holds node-locally once the shared store is gone (a short
	// caller deadline overrides the store's budget).
	e.kit.Server.Shutdown()
	for _, bs := range [][]string{{"a", "b", "c"}, {"a"}, {"a", "b", "c"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		got, err := s.Load(ctx, "acct", bs)
		cancel()
		if err != nil || len(got) != len(bs) {
			t.Fatalf("load %v: %v %v", bs, got, err)
		}
		check(got)
		if !got[0].Fallback {
			t.Fatal("expected a node-local answer")
		}
	}
}

func TestServerStoppedAnswersLocallyWithinBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const budget = 150 * time.Millisecond
	const slack = time.Second // scheduling on a loaded -race run
	t0 := time.Now().UnixMilli()
	s := e.store(cooldown.WithBudget(budget))
	ctx := testkit.Context(t) // a 30 s deadline: the budget must still bound every call
	// Whether or not these reach the shared store in time, they land locally.
	snaps := []protocol.Snapshot{{Key: "rpm", Percent: 10, ResetsAtMs: t0 + 60_000, ObservedAtMs: t0}}
	for _, err := range []error{
		s.Record(ctx, protocol.Reading{Account: "acct", Backend: "a", ObservedAtMs: t0, Snapshots: snaps}),
		s.Penalize(ctx, "acct", "b", i64(t0+60_000)),
	} {
		if err != nil && !errors.Is(err, protocol.ErrUnavailable) {
			t.Fatal(err)
		}
	}
	want := []protocol.Entry{
		{Backend: "a", LastCheckedMs: i64(t0), Snapshots: snaps, Fallback: true},
		{Backend: "b", PenaltyUntilMs: i64(t0 + 60_000), Snapshots: []protocol.Snapshot{}, Fallback: true},
		{Backend: "c", Snapshots: []protocol.Snapshot{}, Fallback: true},
	}

	e.kit.Server.Shutdown()

	begin := time.Now()
	got, err := s.Load(ctx, "acct", []string{"a", "b", "c"})
	if el := time.Since(begin); el > budget+slack {
		t.Fatalf("load took %v with a %v budget", el, budget)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, want, entryEqual) {
		t.Fatalf("local answer:\n got %+v\nwant %+v", got, want)
	}

	// Writes fail with protocol.ErrUnavailable within the budget but land locally.
	for i, write := range []func() error{
		func() error {
			return s.Record(ctx, protocol.Reading{Account: "acct", Backend: "c", ObservedAtMs: t0 + 5})
		},
		func() error { return s.Penalize(ctx, "acct", "a", i64(t0+90_000)) },
		func() error { return s.Penalize(ctx, "acct", "b", nil) },
	} {
		begin := time.Now()
		err := write()
		if el := time.Since(begin); el > budget+slack {
			t.Fatalf("write %d took %v with a %v budget", i, el, budget)
		}
		if !errors.Is(err, protocol.ErrUnavailable) {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	got, err = s.Load(ctx, "acct", []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	want[0].PenaltyUntilMs = i64(t0 + 90_000)
	want[1].PenaltyUntilMs = nil
	want[2].LastCheckedMs = i64(t0 + 5)
	if !slices.EqualFunc(got, want, entryEqual) {
		t.Fatalf("local writes not kept:\n got %+v\nwant %+v", got, want)
	}
}

func entryEqual(a, b protocol.Entry) bool {
	return a.Backend == b.Backend && eq(a.LastCheckedMs, b.LastCheckedMs) && eq(a.PenaltyUntilMs, b.PenaltyUntilMs) &&
		slices.Equal(a.Snapshots, b.Snapshots) && a.Fallback == b.Fallback
}

func TestLocalOnlyStore(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UnixMilli()
	s := newStore(t, nil, cooldown.WithMaxLocalEntries(2))
	ctx := testkit.Context(t)
	for i, b := range []string{"a", "b", "c"} {
		err := s.Record(ctx, protocol.Reading{Account: "x", Backend: b, ObservedAtMs: t0 + int64(i)})
		if !errors.Is(err, protocol.ErrUnavailable) {
			t.Fatalf("record without a bucket: %v", err)
		}
	}
	// Bounded: "a" was evicted.
	got := load(t, s, "x", "a", "b", "c")
	if got[0].LastCheckedMs != nil || !eq(got[1].LastCheckedMs, i64(t0+1)) || !eq(got[2].LastCheckedMs, i64(t0+2)) || !got[0].Fallback {
		t.Fatalf("after eviction: %+v", got)
	}
	// Touch "b" so that "c" is the least recently used, then add "d".
	load(t, s, "x", "b")
	_ = s.Penalize(ctx, "x", "d", i64(t0+60_000))
	got = load(t, s, "x", "b", "c", "d")
	if got[0].LastCheckedMs == nil || got[1].LastCheckedMs != nil || !eq(got[2].PenaltyUntilMs, i64(t0+60_000)) {
		t.Fatalf("LRU eviction: %+v", got)
	}
}

func TestLocalPenaltySurvivesLostSharedWrite(t *testing.T) {
	e, t0 := parallelEnv(t)
	clk := newClock(t0)
	s1 := e.store(cooldown.WithClock(clk.Now))
	s2 := newStore(t, e.secondBucket(t), testBudget, cooldown.WithClock(clk.Now))
	fresh := func() *cooldown.Store { return e.store(cooldown.WithClock(clk.Now)) }

	t.Run("shared write failed", func(t *testing.T) {
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s1.Penalize(dead, "acct", "w", i64(t0+60_000)); !errors.Is(err, protocol.ErrUnavailable) {
			t.Fatalf("penalize with a dead context: %v", err)
		}
		if got := load(t, fresh(), "acct", "w")[0]; got.PenaltyUntilMs != nil {
			t.Fatalf("write reached the shared store: %+v", got)
		}
		got := load(t, s1, "acct", "w")[0]
		if got.Fallback || !eq(got.PenaltyUntilMs, i64(t0+60_000)) {
			t.Fatalf("successful read lost the local penalty: %+v", got)
		}
		// The later of the shared and the local penalty wins.
		penalize(t, s2, "acct", "w", i64(t0+30_000))
		if got := load(t, s1, "acct", "w")[0]; !eq(got.PenaltyUntilMs, i64(t0+60_000)) {
			t.Fatalf("sooner shared penalty won: %s", show(got.PenaltyUntilMs))
		}
		penalize(t, s2, "acct", "w", i64(t0+90_000))
		if got := load(t, s1, "acct", "w")[0]; !eq(got.PenaltyUntilMs, i64(t0+90_000)) {
			t.Fatalf("later shared penalty lost: %s", show(got.PenaltyUntilMs))
		}
	})

	t.Run("shared state lost it", func(t *testing.T) {
		penalize(t, s1, "acct", "x", i64(t0+60_000))
		penalize(t, s2, "acct", "x", nil) // another node clears the shared penalty
		if got := load(t, s2, "acct", "x")[0]; got.PenaltyUntilMs != nil {
			t.Fatalf("s2 still sees a penalty: %+v", got)
		}
		if got := load(t, s1, "acct", "x")[0]; !eq(got.PenaltyUntilMs, i64(t0+60_000)) {
			t.Fatalf("s1 lost its own penalty: %+v", got)
		}
	})

	t.Run("a shared reading that passed it clears it", func(t *testing.T) {
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		_ = s1.Penalize(dead, "acct", "y", i64(t0+60_000))
		record(t, s2, protocol.Reading{Account: "acct", Backend: "y", ObservedAtMs: t0 + 59_000})
		if got := load(t, s1, "acct", "y")[0]; !eq(got.PenaltyUntilMs, i64(t0+60_000)) || !eq(got.LastCheckedMs, i64(t0+59_000)) {
			t.Fatalf("reading before the instant: %+v", got)
		}
		record(t, s2, protocol.Reading{Account: "acct", Backend: "y", ObservedAtMs: t0 + 60_000})
		got := load(t, s1, "acct", "y")[0]
		if got.PenaltyUntilMs != nil || !eq(got.LastCheckedMs, i64(t0+60_000)) {
			t.Fatalf("reading at the instant did not clear the local penalty: %+v", got)
		}
	})
}

func TestAccountsAreIsolated(t *testing.T) {
	e, t0 := parallelEnv(t)
	s := e.store()
	record(t, s, protocol.Reading{Account: "A", Backend: "llm", ObservedAtMs: t0})
	penalize(t, s, "A", "llm", i64(t0+60_000))
	for _, st := range []*cooldown.Store{s, e.store()} {
		if got := load(t, st, "B", "llm")[0]; got.LastCheckedMs != nil || got.PenaltyUntilMs != nil || len(got.Snapshots) != 0 {
			t.Fatalf("account B sees A: %+v", got)
		}
		if got := load(t, st, "A", "llm")[0]; got.LastCheckedMs == nil || got.PenaltyUntilMs == nil {
			t.Fatalf("account A lost its state: %+v", got)
		}
	}
}

func TestHostileNamesDoNotCollide(t *testing.T) {
	e, t0 := parallelEnv(t)
	s := e.store()
	type pair struct{ account, backend string }
	pairs := []pair{
		{"a", "b"}, {"a.>", "b"}, {"*", "b"}, {"a.b", "c"}, {"a", "b.c"}, {"a", "b=2Ec"}, {"a=2Eb", "c"},
		{">", ">"}, {"a", "*"}, {"a", ">"}, {"a b", "c d"}, {"é", "ü"}, {"=", "="}, {"a/b", "c"},
		{"$KV.x", "y"}, {"a\x00", "b"}, {"a", "b\n"},
	}
	for i, p := range pairs {
		record(t, s, protocol.Reading{Account: p.account, Backend: p.backend, ObservedAtMs: t0 - int64(i)})
		penalize(t, s, p.account, p.backend, i64(t0+60_000+int64(i)))
	}
	fresh := e.store()
	for i, p := range pairs {
		for _, st := range []*cooldown.Store{s, fresh} {
			got := load(t, st, p.account, p.backend)[0]
			if !eq(got.LastCheckedMs, i64(t0-int64(i))) || !eq(got.PenaltyUntilMs, i64(t0+60_000+int64(i))) {
				t.Fatalf("%d %q/%q: %+v", i, p.account, p.backend, got)
			}
		}
	}
	// Exactly one key per pair in the bucket.
	keys, err := e.bucket.KV().ListKeys(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = keys.Stop() }()
	n := 0
	for range keys.Keys() {
		n++
	}
	if n != len(pairs) {
		t.Fatalf("%d keys for %d pairs", n, len(pairs))
	}
}

func TestPenaltyKeyExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.store()
	ctx := testkit.Context(t)
	until := time.Now().Add(1200 * time.Millisecond).UnixMilli()
	penalize(t, s, "acct", "llm", &until)
	if got := load(t, s, "acct", "llm")[0]; !eq(got.PenaltyUntilMs, &until) {
		t.Fatalf("penalty = %s", show(got.PenaltyUntilMs))
	}
	rec, err := e.bucket.Get(ctx, cooldown.Key("acct", "llm"))
	if err != nil || rec.TTL != 2*time.Second {
		t.Fatalf("key: %+v %v (want a 2 s TTL: 1.2 s rounded up)", rec, err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		_, err := e.bucket.Get(ctx, cooldown.Key("acct", "llm"))
		return errors.Is(err, kvstore.ErrNotFound)
	}, "penalty key expires")
	if now := time.Now().UnixMilli(); now < until {
		t.Fatalf("key expired %d ms before the penalty's instant", until-now)
	}
	for _, st := range []*cooldown.Store{s, e.store()} {
		if got := load(t, st, "acct", "llm")[0]; got.PenaltyUntilMs != nil {
			t.Fatalf("expired penalty reported: %+v", got)
		}
	}
}

func TestKeyTTLCoversReadingAndPenalty(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.store(cooldown.WithReadingTTL(time.Second))
	ctx := testkit.Context(t)
	key := cooldown.Key("acct", "llm")
	start := time.Now()
	until := start.Add(2500 * time.Millisecond).UnixMilli()
	penalize(t, s, "acct", "llm", &until)
	record(t, s, protocol.Reading{Account: "acct", Backend: "llm", ObservedAtMs: start.UnixMilli() - 1})
	rec, err := e.bucket.Get(ctx, key)
	if err != nil || rec.TTL < 2*time.Second {
		t.Fatalf("key TTL must cover the penalty: %+v %v", rec, err)
	}
	// The reading goes after ~1 s while the key lives on for the penalty.
	testkit.Eventually(t, 5*time.Second, func() bool {
		got := load(t, e.store(), "acct", "llm")[0]
		return !got.Fallback && got.LastCheckedMs == nil
	}, "reading expires")
	got := load(t, s, "acct", "llm")[0]
	if time.Now().UnixMilli() < until && (got.LastCheckedMs != nil || !eq(got.PenaltyUntilMs, &until)) {
		t.Fatalf("after the reading's TTL, before the penalty's instant: %+v", got)
	}
	testkit.Eventually(t, 6*time.Second, func() bool {
		_, err := e.bucket.Get(ctx, key)
		return errors.Is(err, kvstore.ErrNotFound)
	}, "key expires")
	if time.Now().UnixMilli() < until {
		t.Fatal("key expired before the penalty's instant")
	}

	// A reading alone: the key expires with the reading TTL.
	record(t, s, protocol.Reading{Account: "acct", Backend: "solo", ObservedAtMs: 1})
	rec, err = e.bucket.Get(ctx, cooldown.Key("acct", "solo"))
	if err != nil || rec.TTL != time.Second {
		t.Fatalf("reading key: %+v %v", rec, err)
	}
}

// TestConcurrentRecordPenalize: 32 goroutines on 8 nodes (stores, over two
// connections) record readings and set penalties on one backend.
// Every penalty lies beyond every reading, so no Record may drop one: a
// Record that dropped a penalty landing concurrently would leave none.
func TestConcurrentRecordPenalize(t *testing.T) {
	e, t0 := parallelEnv(t)
	clk := newClock(t0)
	opts := []cooldown.Option{cooldown.WithClock(clk.Now), cooldown.WithBudget(10 * time.Second)}
	buckets := []*kvstore.Bucket{e.bucket, e.secondBucket(t)}
	var nodes []*cooldown.Store
	for i := range 8 {
		nodes = append(nodes, newStore(t, buckets[i%2], opts...))
	}
	penalize(t, nodes[0], "acct", "llm", i64(t0+1000)) // reached by every reading

	const workers, rounds = 32, 4
	var mu sync.Mutex
	penalties := map[int64]bool{}
	var maxObs int64
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			s := nodes[w%len(nodes)]
			for r := range rounds {
				ctx := context.Background()
				if (w/len(nodes))%2 == 0 { // every node both records and penalizes
					obs := t0 + 2000 + int64(r*workers+w)
					mu.Lock()
					maxObs = max(maxObs, obs)
					mu.Unlock()
					snaps := []protocol.Snapshot{{Key: "who", Label: fmt.Sprint(obs), Percent: float64(w), ObservedAtMs: obs}}
					errs <- s.Record(ctx, protocol.Reading{Account: "acct", Backend: "llm", ObservedAtMs: obs, Snapshots: snaps})
				} else {
					until := t0 + 1_000_000 + int64(r*workers+w)
					mu.Lock()
					penalties[until] = true
					mu.Unlock()
					errs <- s.Penalize(ctx, "acct", "llm", &until)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var shared protocol.Entry
	for i, s := range append(nodes, e.store(opts...)) {
		got := load(t, s, "acct", "llm")[0]
		if !eq(got.LastCheckedMs, &maxObs) || len(got.Snapshots) != 1 || got.Snapshots[0].Label != fmt.Sprint(maxObs) {
			t.Fatalf("store %d: reading lost: %+v (want observed %d)", i, got, maxObs)
		}
		if got.PenaltyUntilMs == nil || !penalties[*got.PenaltyUntilMs] {
			t.Fatalf("store %d: penalty lost or foreign: %s", i, show(got.PenaltyUntilMs))
		}
		shared = got // the fresh store (last) sees the shared state only
	}
	// Nodes report the later of the shared penalty and their own last one.
	for i, s := range nodes {
		if got := load(t, s, "acct", "llm")[0]; *got.PenaltyUntilMs < *shared.PenaltyUntilMs {
			t.Fatalf("node %d reports %d, sooner than the shared %d", i, *got.PenaltyUntilMs, *shared.PenaltyUntilMs)
		}
	}
}

func TestStoreRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.store()
	ctx := testkit.Context(t)
	long := string(make([]byte, protocol.MaxNameBytes+1))
	if err := s.Record(ctx, protocol.Reading{Account: "", Backend: "b"}); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("record: %v", err)
	}
	if err := s.Penalize(ctx, "a", long, nil); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("penalize: %v", err)
	}
	if err := s.Penalize(ctx, "a", "b", i64(-1)); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("penalize: %v", err)
	}
	if _, err := s.Load(ctx, "a", nil); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("load: %v", err)
	}
	keys, err := e.bucket.KV().ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = keys.Stop() }()
	for k := range keys.Keys() {
		t.Fatalf("invalid input wrote %q", k)
	}
}

// TestOptionsValidate: an option with a bad value fails New with
// protocol.ErrInvalidOption instead of leaving the default in place.
func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]cooldown.Option{
		"reading ttl": cooldown.WithReadingTTL(0), "budget": cooldown.WithBudget(-time.Second),
		"clock": cooldown.WithClock(nil), "max local": cooldown.WithMaxLocalEntries(0),
	} {
		if _, err := cooldown.New(nil, o); !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := cooldown.New(nil, cooldown.WithLogger(nil)); err != nil {
		t.Errorf("nil logger (discard): %v", err)
	}
}

// A penalty whose shared write failed is written to the shared store when
// it answers again: the other nodes then see it, unless
// a shared reading reached it meanwhile.
func TestFailedPenaltyWrittenLater(t *testing.T) {
	e, t0 := parallelEnv(t)
	clk := newClock(t0)
	s1 := e.store(cooldown.WithClock(clk.Now))
	other := e.store(cooldown.WithClock(clk.Now)) // another node
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	// The shared writes fail on purpose (a context that has ended).
	for _, b := range []string{"w", "reached", "cleared"} {
		if err := s1.Penalize(dead, "acct", b, i64(t0+60_000)); !errors.Is(err, protocol.ErrUnavailable) {
			t.Fatalf("penalize %s with a dead context: %v", b, err)
		}
	}
	// A failed clear is not replayed: "cleared" was penalized, then cleared
	// node-locally only.
	if err := s1.Penalize(dead, "acct", "cleared", nil); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("clear with a dead context: %v", err)
	}
	got := load(t, other, "acct", "w", "reached", "cleared")
	for _, g := range got {
		if g.PenaltyUntilMs != nil {
			t.Fatalf("a failed write reached the shared store: %+v", got)
		}
	}
	// Meanwhile another node's reading reaches the "reached" penalty.
	record(t, other, protocol.Reading{Account: "acct", Backend: "reached", ObservedAtMs: t0 + 60_000})

	// The store answers s1 again (a write of an unrelated key): the pending
	// penalty is written.
	record(t, s1, protocol.Reading{Account: "acct", Backend: "unrelated", ObservedAtMs: t0})
	got = load(t, other, "acct", "w", "reached", "cleared")
	if !eq(got[0].PenaltyUntilMs, i64(t0+60_000)) {
		t.Fatalf("the failed penalty was not written when the store answered again: %+v", got[0])
	}
	if got[1].PenaltyUntilMs != nil || got[2].PenaltyUntilMs != nil {
		t.Fatalf("a reached or cleared penalty was written: reached %s, cleared %s", show(got[1].PenaltyUntilMs), show(got[2].PenaltyUntilMs))
	}

	// Written once: another node's clear afterwards stands in the shared
	// store (s1's next calls do not write it again).
	penalize(t, other, "acct", "w", nil)
	record(t, s1, protocol.Reading{Account: "acct", Backend: "unrelated", ObservedAtMs: t0 + 1})
	if got := load(t, e.store(cooldown.WithClock(clk.Now)), "acct", "w")[0]; got.PenaltyUntilMs != nil {
		t.Fatalf("the penalty was written again after it reached the store: %+v", got)
	}

	// A Load that the store answers flushes too.
	if err := s1.Penalize(dead, "acct", "v", i64(t0+90_000)); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatal(err)
	}
	load(t, s1, "acct", "unrelated")
	if got := load(t, other, "acct", "v")[0]; !eq(got.PenaltyUntilMs, i64(t0+90_000)) {
		t.Fatalf("a Load the store answered did not write the pending penalty: %+v", got)
	}
}
