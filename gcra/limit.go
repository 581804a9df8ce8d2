// Package gcra is the pure arithmetic of sluice's rate limits, the Generic
// Cell Rate Algorithm exactly as PROTOCOL.md's `hit` semantics state it,
// plus Limiter, a node-local set of buckets used when the fleet store is
// unreachable. Instants and a Limit's spans are int64 microseconds since
// the Unix epoch (Micros), a Decision's spans time.Durations; the math never
// reads a clock (now is an argument, as in x/time/rate's AllowN).
//
// A bucket's whole state is its TAT (theoretical arrival time); 0, and any
// TAT <= now, is a full bucket (such TATs may be dropped). One charge of
// Limit{Increment, Capacity} against tat at now:
//
//	new_tat  = max(tat, now) + Increment
//	allow_at = new_tat - Capacity
//	denied iff now < allow_at; retry after max(1 ms, ceil((allow_at-now) / 1 ms))
//
// A denied charge leaves the TAT as it was. The arithmetic is overflow-free
// (uint64 differences, saturating spans: Never; a new TAT beyond int64 is
// denied), and time going backwards never admits more than the limit.
package gcra

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluice-dev/sluice/internal/timeconv"
	"github.com/sluice-dev/sluice/protocol"
)

// Errors returned by this package. Each is returned wrapped with detail;
// test with errors.Is.
var (
	// ErrInvalidLimit is returned for a malformed limit (a span below 1 µs
	// or beyond int64 µs, a rate not finite and > 0, a burst below 1, or
	// ChargeAll slices of different lengths): answer 400, never retry.
	ErrInvalidLimit = errors.New("gcra: invalid limit")
	// ErrImpossible is returned for a charge whose Increment exceeds its
	// Capacity (for example a body larger than the bytes burst): it can never
	// be admitted, however long the caller waits. PROTOCOL.md answers it 400.
	ErrImpossible = errors.New("gcra: charge exceeds capacity")
	// protocol.ErrInvalidOption is returned by NewLimiter for an option with an
	// invalid argument.
	errInvalidOption = fmt.Errorf("gcra: %w", protocol.ErrInvalidOption)
)

// Limit is the shape of one GCRA bucket, or of one charge against it:
// Increment is the cost of one charge in µs (1 s / rate for a unit charge),
// Capacity how far ahead of now the TAT may run (Increment × burst for
// unit charges); admissible only if 1 <= Increment <= Capacity (Validate).
// The zero Limit is invalid.
type Limit struct {
	Increment int64 // µs per charge, >= 1
	Capacity  int64 // µs, >= Increment
}

// maxIntFloat is 2^63, the smallest float64 that does not fit in an int64.
const maxIntFloat = float64(1 << 63)

// LimitFromRate returns the Limit of unit charges against a budget of rate
// charges per second with a burst of burst charges:
//
//	Increment = max(1 µs, round(1 s / rate)), Capacity = Increment × burst.
//
// So exactly burst charges fit a full bucket. At 1 µs resolution, rates
// above 1e6/s behave as 1e6/s: use LimitFromRateN for weighted budgets. The
// error wraps ErrInvalidLimit for a rate not finite and > 0, burst < 1, or a
// capacity beyond int64 microseconds.
func LimitFromRate(rate float64, burst int64) (Limit, error) {
	if err := checkRate(rate, burst); err != nil {
		return Limit{}, err
	}
	iv, ok := roundMicros(1e6 / rate)
	if !ok {
		return Limit{}, fmt.Errorf("%w: rate %g/s is too slow for int64 microseconds", ErrInvalidLimit, rate)
	}
	if iv > math.MaxInt64/burst {
		return Limit{}, fmt.Errorf("%w: capacity %d µs × burst %d overflows int64", ErrInvalidLimit, iv, burst)
	}
	return Limit{Increment: iv, Capacity: iv * burst}, nil
}

// LimitFromRateN returns the Limit of a charge of n units (say bytes)
// against a budget of rate units per second with a burst of burst units,
// rounding once per charge rather than once per unit:
//
//	Increment = max(1 µs, round(n × 1 s / rate)), Capacity = max(1 µs, round(burst × 1 s / rate)).
//
// Capacity does not depend on n, so use it for every charge on such a
// bucket; n = 0 costs 1 µs. (10 MiB/s, 20 MiB burst: 1 MiB costs 100 ms of
// a 2 s capacity.) The error wraps ErrImpossible when n > burst, and
// ErrInvalidLimit for a bad rate, burst < 1, n < 0, or a span beyond int64.
func LimitFromRateN(rate float64, burst, n int64) (Limit, error) {
	if err := checkRate(rate, burst); err != nil {
		return Limit{}, err
	}
	if n < 0 {
		return Limit{}, fmt.Errorf("%w: negative charge %d", ErrInvalidLimit, n)
	}
	if n > burst {
		return Limit{}, fmt.Errorf("%w: charge of %d units exceeds burst %d", ErrImpossible, n, burst)
	}
	capacity, ok := roundMicros(float64(burst) * 1e6 / rate)
	if !ok {
		return Limit{}, fmt.Errorf("%w: burst %d at rate %g/s overflows int64 microseconds", ErrInvalidLimit, burst, rate)
	}
	inc, _ := roundMicros(float64(n) * 1e6 / rate) // n <= burst: fits when capacity does
	return Limit{Increment: min(inc, capacity), Capacity: capacity}, nil
}

func checkRate(rate float64, burst int64) error {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0 {
		return fmt.Errorf("%w: rate %g is not a finite number > 0", ErrInvalidLimit, rate)
	}
	if burst < 1 {
		return fmt.Errorf("%w: burst %d < 1", ErrInvalidLimit, burst)
	}
	return nil
}

// roundMicros rounds a span in microseconds to an int64 of at least 1.
func roundMicros(us float64) (int64, bool) {
	v := math.Round(us)
	if !(v < maxIntFloat) { // also catches NaN
		return 0, false
	}
	return max(1, int64(v)), true
}

// valid reports whether a charge of l can ever be admitted.
func (l Limit) valid() bool { return l.Increment >= 1 && l.Capacity >= l.Increment }

// Validate returns nil if a charge of l can be admitted into an empty bucket.
// Otherwise the error wraps ErrInvalidLimit (Increment or Capacity below
// 1 µs) or ErrImpossible (Increment > Capacity).
func (l Limit) Validate() error {
	switch {
	case l.Increment < 1:
		return fmt.Errorf("%w: increment %d µs < 1 µs", ErrInvalidLimit, l.Increment)
	case l.Capacity < 1:
		return fmt.Errorf("%w: capacity %d µs < 1 µs", ErrInvalidLimit, l.Capacity)
	case l.Increment > l.Capacity:
		return fmt.Errorf("%w: increment %d µs > capacity %d µs", ErrImpossible, l.Increment, l.Capacity)
	}
	return nil
}

// Burst is the number of charges of l that fit into a full bucket,
// Capacity / Increment rounded down: the q= of a RateLimit-Policy header.
// It is 0 for an invalid l.
func (l Limit) Burst() int64 {
	if !l.valid() {
		return 0
	}
	return l.Capacity / l.Increment
}

// Window is the time an empty bucket takes to become full again: Capacity as
// a Duration (saturating), 0 if Capacity < 0. Its whole seconds rounded up
// (CeilSeconds) are the w= of a RateLimit-Policy header.
func (l Limit) Window() time.Duration {
	if l.Capacity < 0 {
		return 0
	}
	return microsDuration(uint64(l.Capacity))
}

// Micros converts t to the package's time unit: microseconds since the Unix
// epoch (t.UnixMicro()).
func Micros(t time.Time) int64 { return t.UnixMicro() }

// CeilSeconds rounds d up to whole seconds, 0 for d <= 0: the delta-seconds of
// Retry-After (callers raise it to >= 1) and the t= and w= of the RateLimit
// headers.
func CeilSeconds(d time.Duration) int64 { return timeconv.Ceil(d, time.Second) }
