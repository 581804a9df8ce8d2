package gcra

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustLimit(t testing.TB, r float64, burst int64) Limit {
	t.Helper()
	l, err := LimitFromRate(r, burst)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLimiterStepsMatchPure(t *testing.T) {
	// Every step table gives the same decisions through a Limiter bucket.
	for _, tc := range stepCases {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.lim(t)
			var l Limiter // the zero value is ready
			tat := int64(0)
			for i, s := range tc.steps {
				now := t0 + s.at.Microseconds()
				d, err := l.Charge("hooks/acme", lim, now)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				checkStep(t, i, lim, max(tat, now), now, s, d)
				if d.Allowed {
					tat = d.TAT
				}
			}
		})
	}
}

func TestLimiterChargeInvalid(t *testing.T) {
	var l Limiter
	for _, lim := range []Limit{{}, {-1, 5}, {6, 5}} {
		_, err := l.Charge("k", lim, t0)
		if !errors.Is(err, ErrInvalidLimit) && !errors.Is(err, ErrImpossible) {
			t.Fatalf("Charge(%+v) error = %v", lim, err)
		}
	}
	if n := l.Len(); n != 0 {
		t.Fatalf("Len = %d after invalid charges", n)
	}
}

func TestLimiterConcurrentBurst(t *testing.T) {
	const goroutines, burst = 200, 50
	lim := mustLimit(t, 1e-6, burst) // refills once in ~11.6 days
	var l Limiter
	admitted := admittedAtOnce(t, goroutines, func() (Decision, error) {
		d, err := l.Charge("hooks/acme", lim, t0)
		if err == nil && !d.Allowed && d.RetryAfter < time.Millisecond {
			t.Errorf("denied with RetryAfter %v", d.RetryAfter)
		}
		return d, err
	})
	if admitted != burst {
		t.Fatalf("admitted %d of %d charges, want exactly %d", admitted, goroutines, burst)
	}
}

func TestLimiterConcurrentChargeAll(t *testing.T) {
	// Two buckets, burst 50 and 30, charged together: exactly 30 pass and
	// neither bucket is charged by a denied call.
	const goroutines = 200
	hooks, bytes := mustLimit(t, 1e-6, 50), mustLimit(t, 1e-6, 30)
	var l Limiter
	keys := []string{"hooks/acme", "bytes/acme"}
	admitted := admittedAtOnce(t, goroutines, func() (Decision, error) {
		return l.ChargeAll(keys, []Limit{hooks, bytes}, t0)
	})
	if admitted != 30 {
		t.Fatalf("admitted %d, want 30", admitted)
	}
	d, err := l.Charge("hooks/acme", hooks, t0)
	if err != nil || !d.Allowed || d.Remaining != 50-30-1 {
		t.Fatalf("hooks after 30 all-or-nothing charges: %+v, %v; want allowed with 19 remaining", d, err)
	}
}

// admittedAtOnce runs charge on n goroutines released together and
// returns how many were allowed; an error fails the test.
func admittedAtOnce(t *testing.T, n int, charge func() (Decision, error)) int64 {
	t.Helper()
	var admitted atomic.Int64
	var start, wg sync.WaitGroup
	start.Add(1)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			d, err := charge()
			if err != nil {
				t.Error(err)
				return
			}
			if d.Allowed {
				admitted.Add(1)
			}
		}()
	}
	start.Done()
	wg.Wait()
	return admitted.Load()
}

func TestLimiterChargeAll(t *testing.T) {
	hooks := Limit{Increment: 1_000_000, Capacity: 2_000_000}
	var l Limiter
	type op struct {
		keys    []string
		lims    []Limit
		allowed bool
		retry   time.Duration
		err     error
	}
	ops := []op{
		{[]string{"h/a", "b/a"}, []Limit{hooks, hooks}, true, 0, nil},
		{[]string{"h/a", "h/a"}, []Limit{hooks, hooks}, false, time.Second, nil}, // 2nd charge on h/a needs 1 s more
		{[]string{"h/a"}, []Limit{hooks}, true, 0, nil},                          // so nothing was applied
		{[]string{"h/x", "h/x"}, []Limit{hooks, hooks}, true, 0, nil},            // duplicates apply in order
		{[]string{"h/x"}, []Limit{hooks}, false, time.Second, nil},
		{[]string{"b/a", "h/a", "h/y"}, []Limit{hooks, hooks, hooks}, false, time.Second, nil},
		{[]string{"h/y"}, []Limit{hooks}, true, 0, nil},
		{[]string{"h/y"}, []Limit{hooks}, true, 0, nil},
		{nil, nil, true, 0, nil},
		{[]string{"h/z"}, nil, false, 0, ErrInvalidLimit},
		{[]string{"h/z", "b/z"}, []Limit{hooks, {3, 2}}, false, 0, ErrImpossible},
		{[]string{"h/z"}, []Limit{{}}, false, 0, ErrInvalidLimit},
	}
	for i, o := range ops {
		d, err := l.ChargeAll(o.keys, o.lims, t0)
		if !errors.Is(err, o.err) || (o.err == nil) != (err == nil) {
			t.Fatalf("step %d: error = %v, want %v", i, err, o.err)
		}
		if d.Allowed != o.allowed || d.RetryAfter != o.retry {
			t.Fatalf("step %d: %+v, want allowed=%v retry=%v", i, d, o.allowed, o.retry)
		}
	}
	if n := l.Len(); n != 4 { // h/a b/a h/x h/y
		t.Fatalf("Len = %d, want 4", n)
	}
}

func TestLimiterChargeAllMany(t *testing.T) {
	// More keys than the allocation-free path, spread over many stripes.
	var l Limiter
	lim := Limit{Increment: 1, Capacity: 1}
	keys := make([]string, 100)
	lims := make([]Limit, len(keys))
	for i := range keys {
		keys[i], lims[i] = fmt.Sprintf("k%d", i), lim
	}
	if d, err := l.ChargeAll(keys, lims, t0); err != nil || !d.Allowed {
		t.Fatalf("first: %+v %v", d, err)
	}
	l.Reset("k42")
	if d, err := l.ChargeAll(keys, lims, t0); err != nil || d.Allowed || d.ResetAfter != time.Microsecond {
		t.Fatalf("second: %+v %v", d, err)
	}
	if n := l.Len(); n != 99 {
		t.Fatalf("Len = %d, want 99 (a denied ChargeAll wrote k42)", n)
	}
}

func TestLimiterRefundReset(t *testing.T) {
	lim := mustLimit(t, 1e-6, 2)
	var l Limiter
	charge := func(step int, want bool) {
		t.Helper()
		d, err := l.Charge("k", lim, t0)
		if err != nil || d.Allowed != want {
			t.Fatalf("step %d: %+v %v, want allowed=%v", step, d, err, want)
		}
	}
	charge(0, true)
	charge(1, true)
	charge(2, false)
	l.Refund("k", lim, t0)
	charge(3, true)
	charge(4, false)
	l.Reset("k")
	if n := l.Len(); n != 0 {
		t.Fatalf("Len after Reset = %d", n)
	}
	charge(5, true)
	l.Refund("k", lim, t0)
	if n := l.Len(); n != 0 {
		t.Fatalf("Len after refunding to full = %d, want the bucket dropped", n)
	}
	l.Refund("k", lim, t0) // absent: a no-op
	l.Refund("k", Limit{}, t0)
	charge(6, true)
	charge(7, true)
	charge(8, false)
}

func TestLimiterNoStateIsFull(t *testing.T) {
	// Even before the epoch, where the pure math's TAT 0 is ahead of now.
	var l Limiter
	lim := Limit{Increment: 1, Capacity: 3}
	d, err := l.Charge("k", lim, -1_000_000)
	if err != nil || !d.Allowed || d.Remaining != 2 {
		t.Fatalf("%+v %v, want allowed with 2 remaining", d, err)
	}
}

func TestLimiterEvictsIdle(t *testing.T) {
	// 200k distinct keys, each idle 1 ms after its only charge, as the clock
	// advances 1 ms per charge: the map stays bounded by the lazy sweeps.
	var l Limiter
	lim := Limit{Increment: 1000, Capacity: 1000}
	const n = 200_000
	bound := numStripes * (2*minSweep + 1)
	most := 0
	now := t0
	for i := range n {
		now += 1000
		if d, err := l.Charge(fmt.Sprintf("tenant-%d", i), lim, now); err != nil || !d.Allowed {
			t.Fatalf("charge %d: %+v %v", i, d, err)
		}
		if i%1000 == 0 {
			most = max(most, l.Len())
		}
	}
	most = max(most, l.Len())
	if most > bound {
		t.Fatalf("Len reached %d, want <= %d", most, bound)
	}
	t.Logf("%d keys charged, Len at most %d", n, most)
	before := l.Len()
	if got := l.Sweep(now); got != before-1 { // the last key is live until now+1ms
		t.Fatalf("Sweep(now) = %d, want %d", got, before-1)
	}
	if got := l.Sweep(now + 1000); got != 1 || l.Len() != 0 {
		t.Fatalf("Sweep(later) = %d, Len = %d; want 1 and 0", got, l.Len())
	}
}

func TestLimiterShrinksAfterPeak(t *testing.T) {
	var l Limiter
	lim := Limit{Increment: 1000, Capacity: 1000}
	for i := range 200_000 {
		if _, err := l.Charge(fmt.Sprint(i), lim, t0); err != nil { // all live at t0
			t.Fatal(err)
		}
	}
	peak := 0
	for i := range l.stripes {
		peak = max(peak, l.stripes[i].peak)
	}
	if peak < shrinkMin {
		t.Fatalf("peak %d: test does not reach shrinkMin", peak)
	}
	l.Sweep(t0 + 1000)
	for i := range l.stripes {
		if s := &l.stripes[i]; s.peak != 0 || len(s.m) != 0 {
			t.Fatalf("stripe %d: peak %d, len %d after sweeping everything", i, s.peak, len(s.m))
		}
	}
}

func TestLimiterMaxKeys(t *testing.T) {
	l, err := NewLimiter(WithMaxKeys(1000))
	if err != nil {
		t.Fatal(err)
	}
	lim := mustLimit(t, 1e-6, 1) // every bucket stays live
	for i := range 20_000 {
		key := fmt.Sprintf("tenant-%d", i)
		if d, err := l.Charge(key, lim, t0); err != nil || !d.Allowed {
			t.Fatalf("charge %d: %+v %v", i, d, err)
		}
		if d, _ := l.Charge(key, lim, t0); d.Allowed { // the newest key is kept
			t.Fatalf("charge %d: the new bucket was evicted at once", i)
		}
	}
	if n := l.Len(); n > 1000+numStripes-1 {
		t.Fatalf("Len = %d, want <= %d", n, 1000+numStripes-1)
	}
}

func TestLimiterMaxKeysPrefersIdle(t *testing.T) {
	l, err := NewLimiter(WithMaxKeys(numStripes)) // one key per stripe
	if err != nil {
		t.Fatal(err)
	}
	live := mustLimit(t, 1e-6, 1)
	idle := Limit{Increment: 1, Capacity: 1}
	// Fill every stripe with a live key or an idle one, then push new keys:
	// a stripe at its bound gives up its key, live or idle, but never grows.
	for i := range 10_000 {
		lim := idle
		if i%2 == 0 {
			lim = live
		}
		if _, err := l.Charge(fmt.Sprint(i), lim, t0+int64(i)*10); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.Len(); n > numStripes {
		t.Fatalf("Len = %d, want <= %d", n, numStripes)
	}
	// An idle key is the victim before a live one in the same sample.
	s := &stripe{}
	s.m = map[string]int64{"live": t0 + 1e9, "idle": t0 - 1, "live2": t0 + 5e8}
	s.evict(t0, nil)
	if _, ok := s.m["idle"]; ok || len(s.m) != 2 {
		t.Fatalf("evict left %v", s.m)
	}
	s.evict(t0, []string{"live2"})
	if _, ok := s.m["live2"]; !ok || len(s.m) != 1 {
		t.Fatalf("evict dropped a protected key: %v", s.m)
	}
	s.evict(t0, []string{"live2"})
	if len(s.m) != 1 {
		t.Fatalf("evict dropped the only, protected key: %v", s.m)
	}
}

func TestNewLimiterOptions(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt} {
		if _, err := NewLimiter(WithMaxKeys(n)); !errors.Is(err, errInvalidOption) {
			t.Errorf("WithMaxKeys(%d): error = %v, want errInvalidOption", n, err)
		}
	}
	for n, want := range map[int]int{1: 1, 64: 1, 65: 2, 1000: 16, math.MaxInt: math.MaxInt/64 + 1} {
		l, err := NewLimiter(WithMaxKeys(n))
		if err != nil || l.perStripe != want {
			t.Errorf("WithMaxKeys(%d): perStripe = %d, %v; want %d", n, l.perStripe, err, want)
		}
	}
	if l, err := NewLimiter(); err != nil || l.perStripe != 0 {
		t.Fatalf("NewLimiter() = %+v, %v", l, err)
	}
}

func TestLimiterAllocs(t *testing.T) {
	var l Limiter
	lim := Limit{Increment: 10_000, Capacity: 2_000_000}
	keys := []string{"hooks/acme", "bytes/acme", "hooks/other"}
	lims := []Limit{lim, lim, lim}
	now := t0
	if _, err := l.ChargeAll(keys, lims, now); err != nil { // create the buckets
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		now += 10_000
		if _, err := l.Charge(keys[0], lim, now); err != nil {
			t.Fatal(err)
		}
		if _, err := l.ChargeAll(keys, lims, now); err != nil {
			t.Fatal(err)
		}
		l.Refund(keys[1], lim, now)
	})
	if allocs != 0 {
		t.Fatalf("allocs per run = %v, want 0", allocs)
	}
}

func TestLimiterRace(t *testing.T) {
	// Every method at once, for -race; the counts are checked elsewhere.
	l, err := NewLimiter(WithMaxKeys(500))
	if err != nil {
		t.Fatal(err)
	}
	lim := Limit{Increment: 1000, Capacity: 5000}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				now := t0 + int64(i)*100
				k := fmt.Sprint((g*7 + i) % 700)
				switch i % 7 {
				case 0:
					l.Reset(k)
				case 1:
					l.Refund(k, lim, now)
				case 2:
					_, _ = l.ChargeAll([]string{k, "shared", fmt.Sprint(i % 13)}, []Limit{lim, lim, lim}, now)
				case 3:
					if i%100 == 3 {
						l.Sweep(now)
						_ = l.Len()
					}
				default:
					_, _ = l.Charge(k, lim, now)
				}
			}
		})
	}
	wg.Wait()
}

func TestLimiterResetPrefix(t *testing.T) {
	lim := mustLimit(t, 1e-6, 1)
	var l Limiter
	keys := []string{"a\x00x", "a\x00y", "ab\x00x", "b\x00a\x00"}
	for _, k := range keys {
		if d, err := l.Charge(k, lim, t0); err != nil || !d.Allowed {
			t.Fatalf("charge %q: %+v %v", k, d, err)
		}
	}
	if n := l.ResetPrefix("a\x00"); n != 2 {
		t.Fatalf("ResetPrefix dropped %d, want 2", n)
	}
	for _, k := range keys {
		d, err := l.Charge(k, lim, t0)
		if want := k[:2] == "a\x00"; err != nil || d.Allowed != want {
			t.Fatalf("charge %q after the reset: %+v %v, want allowed=%v", k, d, err, want)
		}
	}
}
