// Package limits holds a tenant's budgets and the one rule for a valid
// rate. config and edge both name these types (config.Rate and httpapi.Rate,
// config.Limits and httpapi.Limits are aliases of them) without edge importing
// config: a limit read from the file, a record or an admin PUT is the same
// value, checked the same way.
package limits

import (
	"fmt"
	"math"

	"github.com/sluice-dev/sluice/gcra"
)

// Rate is a GCRA budget: Rate units per second with bursts of up to Burst
// units. A valid Rate has a finite Rate > 0 and Burst >= 1 (Validate).
type Rate struct {
	Rate  float64 `json:"rate"`
	Burst int64   `json:"burst"`
}

// Limits are a tenant's budgets: webhooks per second and body bytes per
// second.
type Limits struct {
	Hooks Rate `json:"hooks"`
	Bytes Rate `json:"bytes"`
}

// Validate checks a Rate: finite Rate > 0, Burst >= 1, and both limits the
// edge may compute from it fit — gcra.LimitFromRate (a hooks budget) and
// gcra.LimitFromRateN (a bytes budget, whose capacity rounds burst / rate
// once) — so a rate accepted here never turns every hook into a 500
// invalid_limits. The file, tenant records and the edge's admin PUT all
// decide by it.
func (r Rate) Validate() error {
	if !(r.Rate > 0) || math.IsInf(r.Rate, 0) {
		return fmt.Errorf("rate must be a finite number > 0, got %v", r.Rate)
	}
	if r.Burst < 1 {
		return fmt.Errorf("burst must be >= 1, got %d", r.Burst)
	}
	if _, err := gcra.LimitFromRate(r.Rate, r.Burst); err != nil {
		return fmt.Errorf("rate %v with burst %d: %w", r.Rate, r.Burst, err)
	}
	if _, err := gcra.LimitFromRateN(r.Rate, r.Burst, 0); err != nil {
		return fmt.Errorf("rate %v with burst %d: %w", r.Rate, r.Burst, err)
	}
	return nil
}

// Validate checks both rates of l.
func (l Limits) Validate() error {
	if err := l.Hooks.Validate(); err != nil {
		return fmt.Errorf("hooks: %w", err)
	}
	if err := l.Bytes.Validate(); err != nil {
		return fmt.Errorf("bytes: %w", err)
	}
	return nil
}
