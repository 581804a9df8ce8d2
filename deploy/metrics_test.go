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

	"go.uber.org/fx"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/testkit"
)

// monitoringFiles are the files that name metrics.
var monitoringFiles = []string{"monitoring/sluice-dashboard.json", "monitoring/sluice-alerts.yaml"}

var (
	metricName    = regexp.MustCompile(`\bsluice_[a-z0-9_]+`)
	docMetricName = regexp.MustCompile(`\bsluice_[a-z0-9_]+\*?`)
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
	return startNodeLog(t, slog.New(slog.DiscardHandler), args, getenv)
}

// startNodeLog is startNode logging to log (testkit.StartTogether's node
// log).
func startNodeLog(t *testing.T, log *slog.Logger, args []string, getenv func(string) string) (*node, error) {
	t.Helper()
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg, err := config.Parse(args, getenv, nil)
	if err != nil {
		return nil, err
	}
	var n node
	app := fx.New(sluicefx.Options(context.Background(), cfg, log), fx.Populate(&n.reg, &n.http, &n.nats))
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

// exposed starts a real node with args (its own embedded nats-server, a
// fresh data dir), scrapes its GET /metrics as Prometheus would, and
// returns the metric families the text shows (its "# TYPE" lines): a
// family registered but without a series yet (a vector no one counted
// into) is not there, as it is not for an alert.
func exposed(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	n, err := startNode(t, append(testArgs(t), args...), nil)
	if err != nil {
		t.Fatalf("node %v: %v", args, err)
	}
	return scrape(t, n)
}

// testArgs are a test node's own: a fresh data dir, loopback ports picked
// by the system, no client listener, four partitions.
func testArgs(t *testing.T) []string {
	return []string{"--data-dir", t.TempDir(), "--http-addr", "127.0.0.1:0", "--nats-listen", "off", "--partitions", "4"}
}

// scrape is GET /metrics of n as Prometheus reads it: the families of its
// "# TYPE" lines.
func scrape(t *testing.T, n *node) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, l := range strings.Split(scrapeText(t, n), "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	return names
}

// scrapeText is the text of GET /metrics of n.
func scrapeText(t *testing.T, n *node) string {
	t.Helper()
	res := testkit.HTTP(t, "GET", "http://"+*n.http.Addr.Load()+"/metrics", nil, nil)
	if res.Code != 200 {
		t.Fatalf("GET /metrics: %d", res.Code)
	}
	return string(res.Body)
}

// perConsumer are the families with a series per managed consumer and
// none before the first (docs/OPERATIONS.md "Metrics" says so).
var perConsumer = []string{"sluice_consumer_pending", "sluice_consumer_ack_pending", "sluice_consumer_redelivered",
	"sluice_consumer_oldest_unacked_age_seconds", "sluice_consumer_dead_letters"}

// documented are the sluice_ names a file mentions, each once; a name
// written with a trailing "*" (sluice_service_*) is a prefix, kept with
// its "*".
func documented(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	names := docMetricName.FindAllString(string(data), -1)
	if len(names) == 0 {
		t.Fatalf("%s names no metric", file)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// TestDocumentedMetricsExposed: every metric family docs/OPERATIONS.md,
// the dashboard and the alert rules name is on /metrics of a fresh node
// that has answered nothing yet — a node with the embedded server (and
// one managed consumer, whose lag families have a series each), one
// with claim expiry events, a leaf (leaf-mode metrics) and a node of an
// R1 cluster at synced (the cluster barrier's) — so that an alert on a
// rate is evaluated from the start, and a renamed or dropped metric fails
// here, not on an operator's empty panel or silent alert. (That every
// metric has a panel is not enforced.)
func TestDocumentedMetricsExposed(t *testing.T) {
	const token = "metrics-test-admin-token"
	n, err := startNode(t, append(testArgs(t), "--admin-token", token), nil)
	if err != nil {
		t.Fatal(err)
	}
	// A fresh node shows every family but the per-consumer ones, which
	// have a series per managed consumer and none before the first.
	have := scrape(t, n)
	for _, f := range perConsumer {
		if have[f] {
			t.Errorf("%s is on /metrics of a node without a managed consumer", f)
		}
	}
	// Its first consumer: each of them at 0 from the next reading (a
	// reading serves scrapes for 10 s).
	res := testkit.HTTP(t, "PUT", "http://"+*n.http.Addr.Load()+"/v1/admin/consumers/acme/c1", []byte(`{}`),
		map[string]string{"Authorization": "Bearer " + token})
	if res.Code != 201 {
		t.Fatalf("PUT a managed consumer: %d %s", res.Code, res.Body)
	}
	testkit.Eventually(t, 20*time.Second, func() bool {
		text := scrapeText(t, n)
		for _, f := range perConsumer {
			if !strings.Contains(text, "\n"+f+`{consumer="c1",tenant="acme"} 0`+"\n") {
				return false
			}
		}
		return true
	}, "the five per-consumer families of acme/c1 at 0 on /metrics")
	byConsumer := map[string]bool{}
	for _, f := range perConsumer {
		byConsumer[f] = true
	}
	// With claim expiry events: the expiry watcher's metrics.
	for n := range exposed(t, "--claim-expiry-events=true") {
		have[n] = true
	}
	// A leaf whose hub is not there (yet): it starts, registers its
	// leaf-mode metrics and keeps accepting into its outbox.
	for n := range exposed(t, "--hub-url", "nats-leaf://127.0.0.1:"+strconv.Itoa(testkit.FreePort(t)), "--leaf-name", "e1") {
		have[n] = true
	}
	// A node of a two-node R1 cluster at synced: the cluster barrier's
	// counters.
	routes := []string{"127.0.0.1:" + strconv.Itoa(testkit.FreePort(t)), "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))}
	cluster := testkit.StartTogether(t, 2, 2*time.Minute, "cluster node", func(i int, log *slog.Logger) (*node, error) {
		return startNodeLog(t, log, append(testArgs(t), "--cluster-listen", routes[i], "--routes", "nats-route://"+routes[0]+",nats-route://"+routes[1], "--durability", "synced"), nil)
	})
	for n := range scrape(t, cluster[0]) {
		have[n] = true
	}
	known := func(n string) bool {
		if prefix, ok := strings.CutSuffix(n, "*"); ok {
			for h := range have {
				if strings.HasPrefix(h, prefix) {
					return true
				}
			}
			return false
		}
		if have[n] || byConsumer[n] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && have[base] {
				return true
			}
		}
		return false
	}
	for _, f := range append([]string{"../docs/OPERATIONS.md"}, monitoringFiles...) {
		for _, n := range documented(t, f) {
			if !known(n) {
				t.Errorf("%s: %s is not on /metrics of a fresh node", f, n)
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
