// Package retry is sluice's one rule for waiting between attempts: a wait
// that doubles from a minimum up to a cap, without jitter (the callers'
// retries are few and bounded by a deadline; a fixed sequence keeps their
// worst case known), and a sleep that ends with its context. The doubling
// is github.com/cenkalti/backoff/v5's ExponentialBackOff.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Doubling returns the waits min, 2·min, 4·min, … capped at max
// (NextBackOff; Reset starts again at min). Not safe for concurrent use:
// one per retry loop.
func Doubling(min, max time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     min,
		RandomizationFactor: 0,
		Multiplier:          2,
		MaxInterval:         max,
	}
}

// Sleep waits d, or until ctx ends: ctx's error then (and at once when it
// has ended already).
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
