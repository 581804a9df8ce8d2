package gcra

import (
	"errors"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The package starts no goroutines; the concurrency tests do.
	goleak.VerifyTestMain(m)
}

func TestLimitFromRate(t *testing.T) {
	tests := []struct {
		name    string
		rate    float64
		burst   int64
		want    Limit
		wantErr error
	}{
		{"one per 1000 s, burst 2", 0.001, 2, Limit{1_000_000_000, 2_000_000_000}, nil},
		{"2/s burst 1", 2, 1, Limit{500_000, 500_000}, nil},
		{"100/s burst 200", 100, 200, Limit{10_000, 2_000_000}, nil},
		{"0.5/s burst 1", 0.5, 1, Limit{2_000_000, 2_000_000}, nil},
		{"3/s rounds down", 3, 2, Limit{333_333, 666_666}, nil},
		{"6/s rounds up", 6, 3, Limit{166_667, 500_001}, nil},
		{"1e6/s is 1 µs", 1e6, 5, Limit{1, 5}, nil},
		{"above 1e6/s clamps to 1 µs", 1e7, 5, Limit{1, 5}, nil},
		{"huge burst fits", 1e6, math.MaxInt64, Limit{1, math.MaxInt64}, nil},
		{"zero rate", 0, 1, Limit{}, ErrInvalidLimit},
		{"negative rate", -1, 1, Limit{}, ErrInvalidLimit},
		{"NaN rate", math.NaN(), 1, Limit{}, ErrInvalidLimit},
		{"+Inf rate", math.Inf(1), 1, Limit{}, ErrInvalidLimit},
		{"-Inf rate", math.Inf(-1), 1, Limit{}, ErrInvalidLimit},
		{"zero burst", 1, 0, Limit{}, ErrInvalidLimit},
		{"negative burst", 1, -1, Limit{}, ErrInvalidLimit},
		{"interval overflows int64", 1e-20, 1, Limit{}, ErrInvalidLimit},
		{"smallest float rate", math.SmallestNonzeroFloat64, 1, Limit{}, ErrInvalidLimit},
		{"capacity overflows int64", 1e-6, 1 << 40, Limit{}, ErrInvalidLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LimitFromRate(tt.rate, tt.burst)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("LimitFromRate(%g, %d) error = %v, want %v", tt.rate, tt.burst, err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("LimitFromRate(%g, %d) = %+v, want %+v", tt.rate, tt.burst, got, tt.want)
			}
			if err != nil {
				return
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if got.Burst() != tt.burst {
				t.Fatalf("Burst() = %d, want %d", got.Burst(), tt.burst)
			}
		})
	}
}

func TestLimitFromRateN(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name     string
		rate     float64
		burst, n int64
		want     Limit
		wantErr  error
	}{
		{"1 MiB at 10 MiB/s, burst 20 MiB", 10 * mib, 20 * mib, mib, Limit{100_000, 2_000_000}, nil},
		{"1 byte rounds up to 1 µs", 10 * mib, 20 * mib, 1, Limit{1, 2_000_000}, nil},
		{"empty body costs 1 µs", 10 * mib, 20 * mib, 0, Limit{1, 2_000_000}, nil},
		{"whole burst fits exactly", 10 * mib, 20 * mib, 20 * mib, Limit{2_000_000, 2_000_000}, nil},
		{"unit charge at 3/s", 3, 2, 1, Limit{333_333, 666_667}, nil},
		{"over the burst", 10 * mib, 20 * mib, 20*mib + 1, Limit{}, ErrImpossible},
		{"negative n", 1, 1, -1, Limit{}, ErrInvalidLimit},
		{"zero rate", 0, 1, 1, Limit{}, ErrInvalidLimit},
		{"NaN rate", math.NaN(), 1, 1, Limit{}, ErrInvalidLimit},
		{"zero burst", 1, 0, 0, Limit{}, ErrInvalidLimit},
		{"capacity overflows", 1e-6, 1 << 40, 1, Limit{}, ErrInvalidLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LimitFromRateN(tt.rate, tt.burst, tt.n)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("LimitFromRateN(%g, %d, %d) error = %v, want %v", tt.rate, tt.burst, tt.n, err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("LimitFromRateN(%g, %d, %d) = %+v, want %+v", tt.rate, tt.burst, tt.n, got, tt.want)
			}
			if err == nil {
				if err := got.Validate(); err != nil {
					t.Fatalf("Validate() = %v", err)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		lim  Limit
		want error
	}{
		{Limit{1, 1}, nil},
		{Limit{1, math.MaxInt64}, nil},
		{Limit{math.MaxInt64, math.MaxInt64}, nil},
		{Limit{}, ErrInvalidLimit},
		{Limit{0, 5}, ErrInvalidLimit},
		{Limit{-1, 5}, ErrInvalidLimit},
		{Limit{1, 0}, ErrInvalidLimit},
		{Limit{1, -5}, ErrInvalidLimit},
		{Limit{math.MinInt64, math.MinInt64}, ErrInvalidLimit},
		{Limit{6, 5}, ErrImpossible},
		{Limit{math.MaxInt64, 1}, ErrImpossible},
	}
	for i, tt := range tests {
		err := tt.lim.Validate()
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%d: %+v.Validate() = %v, want %v", i, tt.lim, err, tt.want)
		}
		if err != nil && errors.Is(err, ErrInvalidLimit) && errors.Is(err, ErrImpossible) {
			t.Errorf("%d: %v wraps both sentinels", i, err)
		}
	}
}

func TestBurstWindow(t *testing.T) {
	tests := []struct {
		lim    Limit
		burst  int64
		window time.Duration
	}{
		{Limit{10_000, 2_000_000}, 200, 2 * time.Second},
		{Limit{333_333, 666_667}, 2, 666_667 * time.Microsecond},
		{Limit{3, 10}, 3, 10 * time.Microsecond},
		{Limit{1, math.MaxInt64}, math.MaxInt64, maxMicrosDuration},
		{Limit{0, 10}, 0, 10 * time.Microsecond},
		{Limit{11, 10}, 0, 10 * time.Microsecond},
		{Limit{1, -1}, 0, 0},
	}
	for i, tt := range tests {
		if got := tt.lim.Burst(); got != tt.burst {
			t.Errorf("%d: %+v.Burst() = %d, want %d", i, tt.lim, got, tt.burst)
		}
		if got := tt.lim.Window(); got != tt.window {
			t.Errorf("%d: %+v.Window() = %v, want %v", i, tt.lim, got, tt.window)
		}
	}
}

func TestCeilSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{-time.Second, 0},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Microsecond, 2},
		{2 * time.Second, 2},
		{Never, int64(Never/time.Second) + 1},
		{math.MaxInt64, math.MaxInt64/int64(time.Second) + 1},
	}
	for i, tt := range tests {
		if got := CeilSeconds(tt.d); got != tt.want {
			t.Errorf("%d: CeilSeconds(%v) = %d, want %d", i, tt.d, got, tt.want)
		}
	}
}

func TestMicros(t *testing.T) {
	tm := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.UTC)
	if got, want := Micros(tm), int64(1767323045_000006); got != want {
		t.Fatalf("Micros(%v) = %d, want %d", tm, got, want)
	}
	if got := time.UnixMicro(Micros(tm)); !got.Equal(tm.Truncate(time.Microsecond)) {
		t.Fatalf("round trip = %v", got)
	}
}
