package deploy

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/testkit"
)

// monitoringFiles are the files that name metrics.
var monitoringFiles = []string{"monitoring/sluice-dashboard.json", "monitoring/sluice-alerts.yaml"}

var (
	metricName = regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
)

// node is a running sluice node: the real fx app with its own embedded
// nats-server.
type node struct {
	reg  *sluicefx.Registry
	http *sluicefx.HTTP
	nats *sluicefx.NATS
}

// startNode starts a node with args and the environment getenv (nil:
// none); t.Cleanup stops it. An error is the start-up's.
func startNode(t *testing.T, args []string, getenv func(string) string) (*node, error) {
	t.Helper()
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg, err := config.Parse(args, getenv, nil)
	if err != nil {
		return nil, err
	}
	var n node
	app := fx.New(sluicefx.Options(cfg, slog.New(slog.DiscardHandler)), fx.Populate(&n.reg, &n.http, &n.nats))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("node %v: stop: %v", args, err)
		}
	})
	return &n, nil
}

// registered starts a real node with args (its own embedded nats-server,
// a fresh data dir) and returns the names of every metric its registry
// holds, observed or not (Describe, not Gather: a vector without children
// has no series yet).
func registered(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	all := append([]string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "off", "--partitions", "4"}, args...)
	n, err := startNode(t, all, nil)
	if err != nil {
		t.Fatalf("node %v: %v", args, err)
	}
	ch := make(chan *prometheus.Desc)
	go func() {
		n.reg.Describe(ch)
		close(ch)
	}()
	names := map[string]bool{}
	for d := range ch {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	return names
}

// TestMonitoringMetricsExist: every metric the dashboard and the alert
// rules name is one a node registers — a node with the embedded server,
// one with claim expiry events, and an edge (edge-mode metrics) — so a
// renamed metric fails here, not on an operator's empty panel or silent
// alert. (That every metric has a panel is not enforced: branches adding
// metrics would each have to add panels before merging.)
func TestMonitoringMetricsExist(t *testing.T) {
	have := registered(t)
	// With claim expiry events: the expiry watcher's metrics.
	for n := range registered(t, "--claim-expiry-events=true") {
		have[n] = true
	}
	// An edge whose hub is not there (yet): it starts, registers its
	// edge-mode metrics and keeps accepting into its outbox.
	for n := range registered(t, "--hub-url", "nats-leaf://127.0.0.1:"+strconv.Itoa(testkit.FreePort(t)), "--edge-name", "e1") {
		have[n] = true
	}
	for _, must := range []string{"sluice_edge_requests_total", "sluice_jetstream_storage_ok", "sluice_edge_hub_linked", "sluice_events_expiry_messages_total"} {
		if !have[must] {
			t.Fatalf("the nodes do not register %s (registered: %v)", must, have)
		}
	}
	known := func(n string) bool {
		if have[n] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && have[base] {
				return true
			}
		}
		return false
	}
	for _, f := range monitoringFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		names := metricName.FindAllString(string(data), -1)
		if len(names) == 0 {
			t.Fatalf("%s names no metric", f)
		}
		slices.Sort(names)
		for _, n := range slices.Compact(names) {
			if !known(n) {
				t.Errorf("%s: %s is not a metric sluice registers", f, n)
			}
		}
	}
}

// TestMonitoringFilesParse: the dashboard is Grafana JSON whose panels
// each query Prometheus, and the rules file is rule groups whose alerts
// all have a severity and a summary.
func TestMonitoringFilesParse(t *testing.T) {
	data, err := os.ReadFile("monitoring/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard: uid %q, %d panels", d.UID, len(d.Panels))
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !metricName.MatchString(q.Expr) {
				t.Errorf("panel %q: query %q reads no sluice metric", p.Title, q.Expr)
			}
		}
	}
	data, err = os.ReadFile("monitoring/sluice-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("rules: %v", err)
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q: wants an alert name, expr, severity and summary", r.Alert)
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alert rules")
	}
}
