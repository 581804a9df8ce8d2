package gcra

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

// t0 is the fixed origin of the step tables, in µs since the epoch.
var t0 = Micros(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

const ms = time.Millisecond

// step is one charge at t0+at and the decision expected from it.
type step struct {
	at        time.Duration // offset from t0; may be negative
	allowed   bool
	retry     time.Duration
	remaining int64
	reset     time.Duration
}

// stepCase is a sequence of charges of one limit on one bucket, from no state.
type stepCase struct {
	name  string
	lim   func(t *testing.T) Limit
	steps []step
}

func rate(r float64, burst int64) func(*testing.T) Limit {
	return func(t *testing.T) Limit {
		t.Helper()
		l, err := LimitFromRate(r, burst)
		if err != nil {
			t.Fatalf("LimitFromRate(%g, %d): %v", r, burst, err)
		}
		return l
	}
}

func fixed(l Limit) func(*testing.T) Limit { return func(*testing.T) Limit { return l } }

var stepCases = []stepCase{
	{"rate 0.001 burst 2: ok, ok, denied", rate(0.001, 2), []step{
		{0, true, 0, 1, 1000 * time.Second},
		{0, true, 0, 0, 2000 * time.Second},
		{0, false, 1000 * time.Second, 0, 2000 * time.Second},
	}},
	{"rate 2 burst 1: ok, denied, ok 600 ms later", rate(2, 1), []step{
		{0, true, 0, 0, 500 * ms},
		{0, false, 500 * ms, 0, 500 * ms},
		{600 * ms, true, 0, 0, 500 * ms},
	}},
	{"a charge exactly at allow_at is admitted", rate(2, 1), []step{
		{0, true, 0, 0, 500 * ms},
		{500*ms - time.Microsecond, false, 1 * ms, 0, time.Microsecond},
		{500 * ms, true, 0, 0, 500 * ms},
	}},
	{"burst 3: remaining and reset count down, then refill", rate(1, 3), []step{
		{0, true, 0, 2, 1 * time.Second},
		{0, true, 0, 1, 2 * time.Second},
		{0, true, 0, 0, 3 * time.Second},
		{0, false, 1 * time.Second, 0, 3 * time.Second},
		{1 * time.Second, true, 0, 0, 3 * time.Second}, // exactly at allow_at
		{1500 * ms, false, 500 * ms, 0, 2500 * ms},
		{2500 * ms, true, 0, 0, 2500 * ms},
		{10 * time.Second, true, 0, 2, 1 * time.Second}, // idle long enough: full again
	}},
	{"retry rounds up to whole ms, at least 1 ms", fixed(Limit{1500, 1500}), []step{
		{0, true, 0, 0, 1500 * time.Microsecond},
		{time.Microsecond, false, 2 * ms, 0, 1499 * time.Microsecond},
		{500 * time.Microsecond, false, 1 * ms, 0, 1 * ms},
		{1499 * time.Microsecond, false, 1 * ms, 0, time.Microsecond},
		{1500 * time.Microsecond, true, 0, 0, 1500 * time.Microsecond},
	}},
	{"denied charges change nothing", rate(1, 1), []step{
		{0, true, 0, 0, 1 * time.Second},
		{0, false, 1 * time.Second, 0, 1 * time.Second},
		{100 * ms, false, 900 * ms, 0, 900 * ms},
		{100 * ms, false, 900 * ms, 0, 900 * ms},
		{200 * ms, false, 800 * ms, 0, 800 * ms},
		{999 * ms, false, 1 * ms, 0, 1 * ms},
		{1 * time.Second, true, 0, 0, 1 * time.Second},
	}},
	{"time going backwards admits nothing extra", rate(1, 2), []step{
		{10 * time.Second, true, 0, 1, 1 * time.Second},
		{10 * time.Second, true, 0, 0, 2 * time.Second},
		{5 * time.Second, false, 6 * time.Second, 0, 7 * time.Second},
		{0, false, 11 * time.Second, 0, 12 * time.Second},
		{-time.Hour, false, time.Hour + 11*time.Second, 0, time.Hour + 12*time.Second},
		{11 * time.Second, true, 0, 0, 2 * time.Second},
		{11 * time.Second, false, 1 * time.Second, 0, 2 * time.Second},
	}},
	{"fresh bucket, then a clock that steps back", rate(1, 1), []step{
		{0, true, 0, 0, 1 * time.Second},
		{-5 * time.Second, false, 6 * time.Second, 0, 6 * time.Second},
		{1 * time.Second, true, 0, 0, 1 * time.Second},
	}},
	{"fractional interval: exactly burst charges fit", rate(6, 3), []step{
		{0, true, 0, 2, 166_667 * time.Microsecond},
		{0, true, 0, 1, 333_334 * time.Microsecond},
		{0, true, 0, 0, 500_001 * time.Microsecond},
		{0, false, 167 * ms, 0, 500_001 * time.Microsecond},
	}},
}

// checkStep compares one decision with its step and with the rules that hold
// for every charge, reporting the step index.
func checkStep(t *testing.T, i int, lim Limit, tat, now int64, s step, d Decision) {
	t.Helper()
	got := step{s.at, d.Allowed, d.RetryAfter, d.Remaining, d.ResetAfter}
	if got != s {
		t.Fatalf("step %d (t0%+v): got allowed=%v retry=%v remaining=%d reset=%v, want allowed=%v retry=%v remaining=%d reset=%v",
			i, s.at, got.allowed, got.retry, got.remaining, got.reset, s.allowed, s.retry, s.remaining, s.reset)
	}
	if want := max(tat, now) + lim.Increment; d.Allowed && d.TAT != want {
		t.Fatalf("step %d: allowed TAT = %d, want %d", i, d.TAT, want)
	}
	if !d.Allowed && d.TAT != tat {
		t.Fatalf("step %d: denied charge moved TAT %d -> %d", i, tat, d.TAT)
	}
}

func TestChargeSteps(t *testing.T) {
	for _, tc := range stepCases {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.lim(t)
			var tat int64 // no state: a full bucket
			for i, s := range tc.steps {
				now := t0 + s.at.Microseconds()
				d := lim.Charge(tat, now)
				checkStep(t, i, lim, tat, now, s, d)
				tat = d.TAT
			}
		})
	}
}

func TestChargeExtremes(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	tests := []struct {
		name     string
		lim      Limit
		tat, now int64
		want     Decision
	}{
		{"max increment into an empty bucket at 0", Limit{maxI, maxI}, 0, 0,
			Decision{Allowed: true, TAT: maxI, ResetAfter: maxMicrosDuration}},
		{"max increment, bucket at max", Limit{maxI, maxI}, maxI, 0,
			Decision{TAT: maxI, RetryAfter: Never, ResetAfter: maxMicrosDuration}},
		{"now at MaxInt64: new TAT would overflow", Limit{1, 10}, 0, maxI,
			Decision{TAT: 0, RetryAfter: Never}},
		{"new TAT exactly MaxInt64: nothing more fits", Limit{1, 10}, 0, maxI - 1,
			Decision{Allowed: true, TAT: maxI, ResetAfter: time.Microsecond}},
		{"remaining bounded by the int64 range", Limit{2, 10}, 0, maxI - 5,
			Decision{Allowed: true, TAT: maxI - 3, Remaining: 1, ResetAfter: 2 * time.Microsecond}},
		{"TAT ahead of now by more than MaxInt64", Limit{1, 1}, maxI, minI,
			Decision{TAT: maxI, RetryAfter: Never, ResetAfter: maxMicrosDuration}},
		{"wait of 2^63 µs saturates", Limit{1, maxI}, maxI - 1, minI,
			Decision{TAT: maxI - 1, RetryAfter: Never, ResetAfter: maxMicrosDuration}},
		{"everything at MinInt64", Limit{maxI, maxI}, minI, minI,
			Decision{Allowed: true, TAT: -1, ResetAfter: maxMicrosDuration}},
		{"now 0, no state", Limit{1, 1}, 0, 0,
			Decision{Allowed: true, TAT: 1, ResetAfter: time.Microsecond}},
		{"huge capacity, remaining", Limit{1, maxI}, 0, 0,
			Decision{Allowed: true, TAT: 1, Remaining: maxI - 1, ResetAfter: time.Microsecond}},
		{"now before the epoch, TAT 0 is 5 µs ahead", Limit{1, 10}, 0, -5,
			Decision{Allowed: true, TAT: 1, Remaining: 4, ResetAfter: 6 * time.Microsecond}},
		{"finite but huge wait saturates to Never", Limit{1, 1}, maxI, 0,
			Decision{TAT: maxI, RetryAfter: Never, ResetAfter: maxMicrosDuration}},
		{"a wait of exactly Never", Limit{1, 1}, int64(Never / time.Microsecond), 0,
			Decision{TAT: int64(Never / time.Microsecond), RetryAfter: Never, ResetAfter: Never}},
		{"1 µs more saturates to Never", Limit{1, 1}, int64(Never/time.Microsecond) + 1, 0,
			Decision{TAT: int64(Never/time.Microsecond) + 1, RetryAfter: Never, ResetAfter: Never + time.Microsecond}},
		{"zero limit", Limit{}, 7, 3,
			Decision{TAT: 7, RetryAfter: Never, ResetAfter: 4 * time.Microsecond}},
		{"negative increment", Limit{-1, 5}, 0, 0, Decision{RetryAfter: Never}},
		{"increment over capacity", Limit{6, 5}, 0, 0, Decision{RetryAfter: Never}},
		{"MinInt64 limit", Limit{minI, minI}, 0, 0, Decision{RetryAfter: Never}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.lim.Charge(tt.tat, tt.now); got != tt.want {
				t.Fatalf("%+v.Charge(%d, %d) = %+v, want %+v", tt.lim, tt.tat, tt.now, got, tt.want)
			}
		})
	}
}

func TestNeverIsWholeMilliseconds(t *testing.T) {
	if Never%time.Millisecond != 0 || math.MaxInt64-Never >= time.Millisecond {
		t.Fatalf("Never = %d", Never)
	}
}

func TestRefund(t *testing.T) {
	lim := Limit{Increment: 1_000_000, Capacity: 3_000_000}
	const maxI, minI = math.MaxInt64, math.MinInt64
	tests := []struct {
		name          string
		lim           Limit
		tat, now, out int64
	}{
		{"undoes one charge", lim, t0 + 2_000_000, t0, t0 + 1_000_000},
		{"undoes the last charge exactly to now", lim, t0 + 1_000_000, t0, t0},
		{"never below now", lim, t0 + 2_000_000, t0 + 1_500_000, t0 + 1_500_000},
		{"a full bucket stays as it is", lim, t0 - 5, t0, t0 - 5},
		{"no state stays no state", lim, 0, t0, 0},
		{"TAT equal to now", lim, t0, t0, t0},
		{"invalid limit refunds nothing", Limit{0, 5}, t0 + 10, t0, t0 + 10},
		{"impossible limit refunds nothing", Limit{6, 5}, t0 + 10, t0, t0 + 10},
		{"extreme: MaxInt64 increment from MaxInt64", Limit{maxI, maxI}, maxI, minI, 0},
		{"extreme: would underflow", Limit{maxI, maxI}, 5, minI, 5 - maxI},
		{"extreme: clamps to MinInt64 now", Limit{maxI, maxI}, -1, minI, minI},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.lim.Refund(tt.tat, tt.now); got != tt.out {
				t.Fatalf("%+v.Refund(%d, %d) = %d, want %d", tt.lim, tt.tat, tt.now, got, tt.out)
			}
		})
	}
}

func TestRefundSteps(t *testing.T) {
	lim := Limit{Increment: 1_000_000, Capacity: 2_000_000}
	var tat int64
	ops := []struct {
		refund  bool
		at      time.Duration
		allowed bool // for charges
		tat     int64
	}{
		{false, 0, true, t0 + 1_000_000},
		{false, 0, true, t0 + 2_000_000},
		{false, 0, false, t0 + 2_000_000},
		{true, 0, false, t0 + 1_000_000},
		{false, 0, true, t0 + 2_000_000},
		{true, 0, false, t0 + 1_000_000},
		{true, 0, false, t0},
		{true, 0, false, t0}, // refunding a full bucket is a no-op
		{false, 0, true, t0 + 1_000_000},
		{false, 0, true, t0 + 2_000_000},
		{false, 0, false, t0 + 2_000_000}, // never more than the burst
	}
	for i, op := range ops {
		now := t0 + op.at.Microseconds()
		if op.refund {
			tat = lim.Refund(tat, now)
		} else {
			d := lim.Charge(tat, now)
			if d.Allowed != op.allowed {
				t.Fatalf("step %d: allowed = %v, want %v", i, d.Allowed, op.allowed)
			}
			tat = d.TAT
		}
		if tat != op.tat {
			t.Fatalf("step %d: TAT = t0%+d, want t0%+d", i, tat-t0, op.tat-t0)
		}
	}
}

// TestLimiterChargeAllCombines: the Decision of several charges, and the
// buckets after it (none applied when one is denied).
func TestLimiterChargeAllCombines(t *testing.T) {
	hooks := Limit{Increment: 1_000_000, Capacity: 2_000_000} // 1/s burst 2
	bytes := Limit{Increment: 100_000, Capacity: 2_000_000}   // 1 MiB of a 10 MiB/s, 20 MiB budget
	tests := []struct {
		name     string
		tats     []int64
		limits   []Limit
		want     Decision
		wantTATs []int64
		wantErr  error
	}{
		{"both fit", []int64{0, 0}, []Limit{hooks, bytes},
			Decision{Allowed: true, Remaining: 1, ResetAfter: time.Second},
			[]int64{t0 + 1_000_000, t0 + 100_000}, nil},
		{"one full: none applied", []int64{t0 + 2_000_000, 0}, []Limit{hooks, bytes},
			Decision{RetryAfter: time.Second, ResetAfter: 2 * time.Second},
			[]int64{t0 + 2_000_000, 0}, nil},
		{"other one full: none applied", []int64{0, t0 + 1_950_000}, []Limit{hooks, bytes},
			Decision{RetryAfter: 50 * ms, ResetAfter: 1_950 * ms},
			[]int64{0, t0 + 1_950_000}, nil},
		{"both denied: the longer wait", []int64{t0 + 1_500_000, t0 + 1_950_000}, []Limit{hooks, bytes},
			Decision{RetryAfter: 500 * ms, ResetAfter: 1_950 * ms},
			[]int64{t0 + 1_500_000, t0 + 1_950_000}, nil},
		{"remaining is the smallest", []int64{0, t0 + 1_850_000}, []Limit{hooks, bytes},
			Decision{Allowed: true, Remaining: 0, ResetAfter: 1_950 * ms},
			[]int64{t0 + 1_000_000, t0 + 1_950_000}, nil},
		{"no charges", nil, nil, Decision{Allowed: true}, nil, nil},
		{"invalid limit", []int64{0, 0}, []Limit{hooks, {}}, Decision{}, []int64{0, 0}, ErrInvalidLimit},
		{"impossible charge", []int64{0, 0}, []Limit{hooks, {3, 2}}, Decision{}, []int64{0, 0}, ErrImpossible},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Limiter
			keys := make([]string, len(tt.tats))
			for i, tat := range tt.tats {
				keys[i] = fmt.Sprintf("k%d", i)
				s := &l.stripes[stripeIndex(keys[i])]
				if s.m == nil {
					s.m = map[string]int64{}
				}
				s.m[keys[i]] = tat
			}
			got, err := l.ChargeAll(keys, tt.limits, t0)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("error = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("decision = %+v, want %+v", got, tt.want)
			}
			for i, k := range keys {
				if tat := l.stripes[stripeIndex(k)].m[k]; tat != tt.wantTATs[i] {
					t.Fatalf("bucket %d: TAT %d, want %d", i, tat, tt.wantTATs[i])
				}
			}
		})
	}
}

func TestChargeAllocs(t *testing.T) {
	lim := Limit{Increment: 10_000, Capacity: 2_000_000}
	now := t0
	allocs := testing.AllocsPerRun(1000, func() {
		now += 10_000
		_ = lim.Charge(0, now)
		_ = lim.Refund(0, now)
	})
	if allocs != 0 {
		t.Fatalf("allocs per run = %v, want 0", allocs)
	}
}
