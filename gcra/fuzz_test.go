package gcra

import (
	"math"
	"math/big"
	"testing"
	"time"
)

var (
	bigMaxInt64 = big.NewInt(math.MaxInt64)
	bigThousand = big.NewInt(1000)
)

// refCharge is PROTOCOL.md's hit arithmetic on unbounded integers: the new
// TAT, and whether the charge is admitted (ignoring the int64 range).
func refCharge(l Limit, tat, now int64) (newTAT, allowAtMinusNow *big.Int, allowed bool) {
	base := big.NewInt(max(tat, now))
	newTAT = new(big.Int).Add(base, big.NewInt(l.Increment))
	allowAt := new(big.Int).Sub(newTAT, big.NewInt(l.Capacity))
	allowAtMinusNow = allowAt.Sub(allowAt, big.NewInt(now))
	return newTAT, allowAtMinusNow, allowAtMinusNow.Sign() <= 0
}

// satMicros is a span in µs as a Duration, saturating like the package.
func satMicros(us *big.Int) time.Duration {
	if us.Sign() <= 0 {
		return 0
	}
	if us.Cmp(big.NewInt(int64(maxMicrosDuration/time.Microsecond))) > 0 {
		return maxMicrosDuration
	}
	return time.Duration(us.Int64()) * time.Microsecond
}

func FuzzCharge(f *testing.F) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	seeds := [][4]int64{ // tat, now, increment, capacity
		{0, t0, 500_000, 500_000},
		{t0 + 500_000, t0, 500_000, 500_000},
		{t0 + 2_000_000_000, t0, 1_000_000_000, 2_000_000_000},
		{t0 + 1_000_000, t0 + 500_000, 1_000_000, 1_000_000},
		{t0 + 10_000_000, t0, 1_000_000, 2_000_000},
		{0, 0, maxI, maxI},
		{maxI, 0, maxI, maxI},
		{0, maxI, 1, 10},
		{0, maxI - 1, 1, 10},
		{maxI, minI, 1, 1},
		{minI, minI, maxI, maxI},
		{maxI - 1, minI, 1, maxI},
		{0, -5, 1, 10},
		{0, 0, 0, 0},
		{0, 0, -1, 5},
		{0, 0, 6, 5},
		{minI, maxI, minI, maxI},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, tat, now, inc, capacity int64) {
		l := Limit{Increment: inc, Capacity: capacity}
		d := l.Charge(tat, now)

		// Rules for every decision.
		if d.Allowed {
			if d.RetryAfter != 0 {
				t.Fatalf("allowed with RetryAfter %v", d.RetryAfter)
			}
		} else {
			if d.TAT != tat {
				t.Fatalf("denied charge moved TAT %d -> %d", tat, d.TAT)
			}
			if d.RetryAfter < time.Millisecond || d.RetryAfter%time.Millisecond != 0 || d.RetryAfter > Never {
				t.Fatalf("denied with RetryAfter %v", d.RetryAfter)
			}
			if d.Remaining != 0 {
				t.Fatalf("denied with Remaining %d", d.Remaining)
			}
		}
		if d.Remaining < 0 || d.ResetAfter < 0 || d.ResetAfter%time.Microsecond != 0 {
			t.Fatalf("negative or fractional span: %+v", d)
		}
		if err := l.Validate(); err != nil {
			if d.Allowed || d.RetryAfter != Never {
				t.Fatalf("invalid %+v (%v) gave %+v", l, err, d)
			}
			if r := l.Refund(tat, now); r != tat {
				t.Fatalf("invalid %+v refunded %d -> %d", l, tat, r)
			}
			return
		}

		// The reference arithmetic.
		newTAT, wait, refAllowed := refCharge(l, tat, now)
		fits := newTAT.Cmp(bigMaxInt64) <= 0
		switch {
		case refAllowed && fits:
			if !d.Allowed || d.TAT != newTAT.Int64() {
				t.Fatalf("reference admits with TAT %v, got %+v", newTAT, d)
			}
		case refAllowed: // new TAT beyond int64: denied, never admitted
			if d.Allowed || d.RetryAfter != Never {
				t.Fatalf("overflowing TAT %v gave %+v", newTAT, d)
			}
		default:
			if d.Allowed {
				t.Fatalf("reference denies (allow_at - now = %v), got %+v", wait, d)
			}
			ms := new(big.Int).Add(wait, big.NewInt(999))
			ms.Quo(ms, bigThousand)
			want := Never
			if ms.Cmp(big.NewInt(int64(Never/time.Millisecond))) <= 0 {
				want = time.Duration(ms.Int64()) * time.Millisecond
			}
			if d.RetryAfter != want {
				t.Fatalf("RetryAfter = %v, want %v (allow_at - now = %v µs)", d.RetryAfter, want, wait)
			}
		}
		state := d.TAT
		ahead := new(big.Int).Sub(big.NewInt(state), big.NewInt(now))
		if got, want := d.ResetAfter, satMicros(ahead); got != want {
			t.Fatalf("ResetAfter = %v, want %v", got, want)
		}
		if !d.Allowed {
			return
		}

		// Allowed: new_tat - capacity <= now, TAT strictly monotonic.
		if ahead.Cmp(big.NewInt(capacity)) > 0 {
			t.Fatalf("admitted with new_tat - now = %v > capacity %d", ahead, capacity)
		}
		if d.TAT <= tat || d.TAT <= now {
			t.Fatalf("TAT did not advance: tat %d now %d -> %d", tat, now, d.TAT)
		}
		// Remaining: exactly that many more charges fit at now.
		nth := func(k int64) (fit bool) {
			kt := new(big.Int).Mul(big.NewInt(k), big.NewInt(inc))
			kt.Add(kt, big.NewInt(d.TAT))
			if kt.Cmp(bigMaxInt64) > 0 {
				return false
			}
			kt.Sub(kt, big.NewInt(capacity))
			return kt.Cmp(big.NewInt(now)) <= 0
		}
		if !nth(d.Remaining) || nth(d.Remaining+1) {
			t.Fatalf("Remaining = %d is not the number of further charges that fit", d.Remaining)
		}
		// The next charge at the same instant agrees with Remaining.
		d2 := l.Charge(d.TAT, now)
		if d2.Allowed != (d.Remaining > 0) {
			t.Fatalf("Remaining %d but the next charge gave %+v", d.Remaining, d2)
		}
		if d2.Allowed && d2.TAT <= d.TAT {
			t.Fatalf("TAT not monotonic: %d -> %d", d.TAT, d2.TAT)
		}
		// Refund undoes the charge to an equivalent state.
		if r := l.Refund(d.TAT, now); r != max(tat, now) {
			t.Fatalf("Refund(%d) = %d, want %d", d.TAT, r, max(tat, now))
		}
		// All-or-nothing agrees with the single charges.
		var lim Limiter
		for k, v := range map[string]int64{"a": tat, "b": d.TAT} {
			s := &lim.stripes[stripeIndex(k)]
			if s.m == nil {
				s.m = map[string]int64{}
			}
			s.m[k] = v
		}
		all, err := lim.ChargeAll([]string{"a", "b"}, []Limit{l, l}, now)
		if err != nil {
			t.Fatal(err)
		}
		if all.Allowed != d2.Allowed || all.Remaining != min(d.Remaining, d2.Remaining) {
			t.Fatalf("ChargeAll = %+v, singles %+v %+v", all, d, d2)
		}
		if a, b := lim.stripes[stripeIndex("a")].m["a"], lim.stripes[stripeIndex("b")].m["b"]; !all.Allowed && (a != tat || b != d.TAT || all.RetryAfter != d2.RetryAfter) {
			t.Fatalf("denied ChargeAll = %+v, tats %d %d", all, a, b)
		}
	})
}

func FuzzRefund(f *testing.F) {
	f.Add(t0+2_000_000, t0, int64(1_000_000), int64(2_000_000))
	f.Add(int64(math.MaxInt64), int64(math.MinInt64), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add(int64(5), int64(math.MinInt64), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, tat, now, inc, capacity int64) {
		l := Limit{Increment: inc, Capacity: capacity}
		r := l.Refund(tat, now)
		if r > tat {
			t.Fatalf("Refund raised TAT %d -> %d", tat, r)
		}
		if tat > now && r < now {
			t.Fatalf("Refund went below now: %d -> %d (now %d)", tat, r, now)
		}
		if l.Validate() == nil && tat > now {
			want := new(big.Int).Sub(big.NewInt(tat), big.NewInt(inc))
			if want.Cmp(big.NewInt(now)) < 0 {
				want.SetInt64(now)
			}
			if r != want.Int64() {
				t.Fatalf("Refund(%d) = %d, want %v", tat, r, want)
			}
		}
	})
}
