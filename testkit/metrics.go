package testkit

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricSeries reads every sample of the counter or gauge name from g,
// keyed by its label values in label-name order joined with "/" (e.g.
// "hit/ok" for labels endpoint and outcome).
func MetricSeries(t testing.TB, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var key []string
			for _, l := range m.GetLabel() {
				key = append(key, l.GetValue())
			}
			v := m.GetCounter().GetValue()
			if g := m.GetGauge(); g != nil {
				v = g.GetValue()
			}
			out[strings.Join(key, "/")] = v
		}
	}
	return out
}
