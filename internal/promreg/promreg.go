// Package promreg holds sluice's one policy for registering Prometheus
// collectors: a collector equal to one already registered is shared (so
// several components, or one restarted in the same process, count into
// one), and any other registration error is returned to the constructor,
// never swallowed and never a panic.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns the collector to use: c, or the
// equal collector already registered. A nil reg registers nothing and
// returns c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		var zero C
		return zero, fmt.Errorf("register metrics: %w", err)
	}
	return c, nil
}
