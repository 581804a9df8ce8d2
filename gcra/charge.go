package gcra

import (
	"fmt"
	"math"
	"time"
)

// Never is the largest RetryAfter a Decision carries: about 292 years, a
// whole number of milliseconds. A charge that cannot be admitted at any time
// (an invalid Limit, or a new TAT beyond the int64 range) is denied with
// RetryAfter == Never, and longer waits saturate to it.
const Never = time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond

// maxMicrosDuration is the largest Duration that is a whole number of µs.
const maxMicrosDuration = time.Duration(math.MaxInt64/int64(time.Microsecond)) * time.Microsecond

// Decision is the outcome of a charge. The zero Decision is a denial with no
// detail; Charge never returns it.
type Decision struct {
	// Allowed reports whether the charge was admitted.
	Allowed bool
	// TAT is the bucket's state after the decision: the new TAT when
	// allowed, the unchanged one when denied. Callers store it.
	// Limiter.ChargeAll of several charges leaves it 0 (it stores them).
	TAT int64
	// RetryAfter is 0 when allowed. When denied it is the wait until the
	// same charge would be admitted, rounded up to whole milliseconds and at
	// least 1 ms (Never when it can never be admitted).
	RetryAfter time.Duration
	// Remaining is how many more charges of the same Limit would be admitted
	// at the same instant, after this decision: the r= of the RateLimit
	// header. Always 0 when denied.
	Remaining int64
	// ResetAfter is the time until the bucket is full again after this
	// decision, max(0, TAT - now) in whole microseconds (saturating): the t=
	// of the RateLimit header (see CeilSeconds).
	ResetAfter time.Duration
}

// ahead returns max(tat, now) - now exactly (it can exceed MaxInt64).
func ahead(tat, now int64) uint64 {
	if tat <= now {
		return 0
	}
	return uint64(tat) - uint64(now)
}

// microsDuration converts microseconds to a Duration, saturating.
func microsDuration(us uint64) time.Duration {
	if us > uint64(maxMicrosDuration/time.Microsecond) {
		return maxMicrosDuration
	}
	return time.Duration(us) * time.Microsecond
}

// retryDuration converts a positive wait in µs to whole ms rounded up, >= 1 ms,
// saturating at Never.
func retryDuration(waitUS uint64) time.Duration {
	ms := waitUS / 1000
	if waitUS%1000 != 0 || ms == 0 {
		ms++
	}
	if ms > uint64(Never/time.Millisecond) {
		return Never
	}
	return time.Duration(ms) * time.Millisecond
}

// Charge applies one charge of l to a bucket whose TAT is tat, at now (both
// in microseconds since the Unix epoch; tat 0 is a full bucket), and returns
// the decision. Store Decision.TAT as the bucket's new state; it equals tat
// when the charge is denied.
//
// Charge does not validate l: check it once with Validate when the limit is
// built. A charge of an invalid Limit is denied with RetryAfter == Never.
// Charge is a pure function: safe for concurrent use, no allocation.
func (l Limit) Charge(tat, now int64) Decision {
	d := ahead(tat, now) // max(tat, now) - now
	if !l.valid() {
		return Decision{TAT: tat, RetryAfter: Never, ResetAfter: microsDuration(d)}
	}
	// allow_at - now = d + Increment - Capacity; admitted iff <= 0.
	slack := uint64(l.Capacity - l.Increment)
	if d > slack {
		return Decision{TAT: tat, RetryAfter: retryDuration(d - slack), ResetAfter: microsDuration(d)}
	}
	base := max(tat, now)
	if base > math.MaxInt64-l.Increment { // new TAT would overflow
		return Decision{TAT: tat, RetryAfter: Never, ResetAfter: microsDuration(d)}
	}
	tat = base + l.Increment
	rem := int64((slack - d) / uint64(l.Increment))
	if tat > math.MaxInt64-rem*l.Increment { // rem*Increment <= slack: no overflow
		rem = (math.MaxInt64 - tat) / l.Increment // later TATs must fit too
	}
	return Decision{
		Allowed:    true,
		TAT:        tat,
		Remaining:  rem,
		ResetAfter: microsDuration(d + uint64(l.Increment)),
	}
}

// Refund undoes one admitted charge of l on a bucket now holding tat, at now,
// and returns the TAT to store: tat - Increment, but never below now. With
// no charge since the refunded one, that is the state without it. It never
// increases a TAT, and no sequence of refunds (even wrong ones) makes a
// bucket fuller than full: a wrong refund hands out at most Increment
// early. An invalid l refunds nothing. Pure and allocation-free.
func (l Limit) Refund(tat, now int64) int64 {
	if !l.valid() || tat <= now {
		return tat
	}
	if uint64(tat)-uint64(now) <= uint64(l.Increment) {
		return now
	}
	return tat - l.Increment
}

func validateAll(limits []Limit) error {
	for i, l := range limits {
		if !l.valid() {
			return fmt.Errorf("charge %d: %w", i, l.Validate())
		}
	}
	return nil
}

// combined folds the decisions of several charges into one.
type combined struct {
	d Decision
	n int
}

func (c *combined) add(d Decision) {
	if c.n == 0 {
		c.d = Decision{Allowed: true, Remaining: d.Remaining}
	}
	c.n++
	if !d.Allowed {
		c.d.Allowed = false
		c.d.RetryAfter = max(c.d.RetryAfter, d.RetryAfter)
	}
	c.d.Remaining = min(c.d.Remaining, d.Remaining)
	c.d.ResetAfter = max(c.d.ResetAfter, d.ResetAfter)
}

// Decide is the one all-or-nothing decision of several charges, shared by
// Limiter.ChargeAll and the quota owner (quota/owner tenure.charge): in
// order, decs[i] = lims[i].Charge(tat(i), now) (tat(i) may read decs[j].TAT
// of an earlier j). It reports whether every charge was allowed and the
// longest RetryAfter of those denied. It applies nothing: the caller stores
// each decs[i].TAT only when allowed, and none of them otherwise.
func Decide(lims []Limit, tat func(i int) int64, now int64, decs []Decision) (allowed bool, retry time.Duration) {
	allowed = true
	for i := range lims {
		d := lims[i].Charge(tat(i), now)
		decs[i] = d
		if !d.Allowed {
			allowed = false
			retry = max(retry, d.RetryAfter)
		}
	}
	return allowed, retry
}

// result returns the combined decision; no charges is an allowed one.
func (c *combined) result() Decision {
	if c.n == 0 {
		return Decision{Allowed: true}
	}
	return c.d
}
