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

// Set is the one way a package builds its metrics: every constructor makes
// the collector sluice_<subsystem>_<name> and registers it on the set's
// Registerer by Register's policy. The first error is kept for Err (the
// constructors still return a usable, unregistered collector), so that a
// package builds all its metrics and checks once.
type Set struct {
	reg       prometheus.Registerer
	subsystem string
	err       error
}

// NewSet is a Set of metrics named sluice_<subsystem>_… on reg (nil: none
// registered).
func NewSet(reg prometheus.Registerer, subsystem string) *Set {
	return &Set{reg: reg, subsystem: subsystem}
}

// Err is the first registration error, nil when every metric is
// registered.
func (s *Set) Err() error { return s.err }

func add[C prometheus.Collector](s *Set, c C) C {
	r, err := Register(s.reg, c)
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return c
	}
	return r
}

// Counter is a counter sluice_<subsystem>_<name>.
func (s *Set) Counter(name, help string) prometheus.Counter {
	return add[prometheus.Counter](s, prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sluice", Subsystem: s.subsystem, Name: name, Help: help}))
}

// CounterVec is a counter vector sluice_<subsystem>_<name> with labels.
func (s *Set) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return add(s, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sluice", Subsystem: s.subsystem, Name: name, Help: help}, labels))
}

// Gauge is a gauge sluice_<subsystem>_<name>.
func (s *Set) Gauge(name, help string) prometheus.Gauge {
	return add[prometheus.Gauge](s, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: s.subsystem, Name: name, Help: help}))
}

// Histogram is a histogram sluice_<subsystem>_<name> with buckets.
func (s *Set) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return add[prometheus.Histogram](s, prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "sluice", Subsystem: s.subsystem, Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec is a histogram vector sluice_<subsystem>_<name> with
// buckets and labels.
func (s *Set) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return add(s, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "sluice", Subsystem: s.subsystem, Name: name, Help: help, Buckets: buckets}, labels))
}

// Zero creates c's series for every combination of values (one list per
// label, in label order) at zero, so that the family is exported, and an
// alert on its rate can be evaluated, before its first count: a vector
// without children has no line on /metrics at all.
func Zero(c *prometheus.CounterVec, values ...[]string) {
	var touch func(prefix []string, rest [][]string)
	touch = func(prefix []string, rest [][]string) {
		if len(rest) == 0 {
			c.WithLabelValues(prefix...)
			return
		}
		for _, v := range rest[0] {
			touch(append(prefix[:len(prefix):len(prefix)], v), rest[1:])
		}
	}
	touch(nil, values)
}
