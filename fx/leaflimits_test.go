package fx_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// quotaOf is who decides a leaf's limits, as its /readyz says.
func quotaOf(t *testing.T, ed *node) string {
	t.Helper()
	_, body := getBody(t, ed.h, "/readyz")
	var r struct {
		Edge *struct {
			Quota string `json:"quota"`
		} `json:"leaf"`
	}
	if json.Unmarshal([]byte(body), &r) != nil || r.Edge == nil {
		return ""
	}
	return r.Edge.Quota
}

// writeLimits writes a configuration whose default budget is 10 hooks,
// then one per 100 s (nothing refills during a test), and returns its path.
func writeLimits(t *testing.T) string {
	return testkit.WriteTemp(t, "limits.yaml", []byte("defaults:\n  limits: {hooks: {rate: 0.01, burst: 10}}\n"))
}

// statuses posts n hooks of tenant with keys round-0…, each to the edge
// pick(i) gives, one after the other, and counts the answers by status.
func statuses(t *testing.T, tenant, round string, n int, pick func(i int) *node) map[int]int {
	t.Helper()
	got := map[int]int{}
	for i := range n {
		code, _ := postHook(t, pick(i).h, tenant, fmt.Sprintf("%s-%d", round, i))
		got[code]++
	}
	return got
}

// postBody posts body to the edge with an Idempotency-Key; the status.
func postBody(t *testing.T, ed *node, tenant, key, body string) int {
	t.Helper()
	return testkit.HTTP(t, http.MethodPost, "http://"+*ed.h.Addr.Load()+"/v1/hooks/"+tenant+"/src", []byte(body),
		map[string]string{"Idempotency-Key": key, "Content-Type": "application/json"}).Code
}

// metricSum adds the values of the lines of metrics matching re.
func metricSum(metrics string, re *regexp.Regexp) float64 {
	var sum float64
	for _, m := range re.FindAllStringSubmatch(metrics, -1) {
		var v float64
		fmt.Sscan(m[1], &v)
		sum += v
	}
	return sum
}

// Limits across the link: while linked, two leaves
// charge the hub's owners, so a tenant gets one budget across them (not
// one per leaf) and a claim the hub's owners took is settled in the hub's
// bucket at once; cut off, a leaf decides from its own state, the same
// limit, without a request toward the hub; linked again, the hub's owners
// decide again.
func TestLeafModeFleetLimits(t *testing.T) {
	t.Parallel()
	leaf := testkit.FreeAddr(t)
	cfgPath := writeLimits(t)
	hubArgs := []string{"--data-dir", t.TempDir(), "--leaf-listen", leaf, "--config", cfgPath}
	// A budget no hit outlasts on a loaded machine: a hit the owner
	// answers late would be decided on the edge (a test of timing, not of
	// who decides).
	edgeArgs := func(name string) []string {
		return []string{"--data-dir", t.TempDir(), "--hub-url", "nats-leaf://" + leaf, "--leaf-name", name,
			"--config", cfgPath, "--store-timeout", "3s"}
	}
	hub := startNode(t, hubArgs...)
	e1, e2 := startNode(t, edgeArgs("e1")...), startNode(t, edgeArgs("e2")...)
	hubServes := func(hub *node) {
		t.Helper()
		testkit.Eventually(t, 15*time.Second, func() bool { return len(hub.q.Worker.Partitions()) == 4 }, "the hub's owner serves every partition")
		for _, ed := range []*node{e1, e2} {
			testkit.Eventually(t, 20*time.Second, func() bool { return quotaOf(t, ed) == forward.RouteHub }, "edge's limits decided by the hub")
		}
	}
	hubServes(hub)

	// One budget for both leaves: 10 of 16 accepted, alternating leaves.
	both := func(i int) *node { return []*node{e1, e2}[i%2] }
	if got := statuses(t, "acme", "linked", 16, both); got[http.StatusAccepted] != 10 || got[http.StatusTooManyRequests] != 6 {
		t.Fatalf("linked, two leaves: %v, want 10 × 202 and 6 × 429 (one budget)", got)
	}
	settled := regexp.MustCompile(`(?m)^sluice_edge_claims_total\{outcome="settled"\} (\S+)$`)
	lost := regexp.MustCompile(`(?m)^sluice_edge_claims_total\{outcome="settle_lost"\} (\S+)$`)
	fallback := regexp.MustCompile(`(?m)^sluice_quota_fallback_total\{op="hit"\} (\S+)$`)
	var s, l, fb float64
	for _, ed := range []*node{e1, e2} {
		_, m := getBody(t, ed.h, "/metrics")
		s, l, fb = s+metricSum(m, settled), l+metricSum(m, lost), fb+metricSum(m, fallback)
	}
	if s != 10 || l != 0 || fb != 0 {
		t.Fatalf("linked: %v settled, %v settles lost, %v local decisions; want 10, 0, 0 (the hub's owners took the claims, "+
			"the leaves settled them in the hub's bucket)", s, l, fb)
	}

	// An Idempotency-Key accepted at e1 and reused with another body at
	// e2: the digest e1 settled into the hub's bucket says so (422).
	if code := postBody(t, e1, "initech", "idem", `{"first":"body"}`); code != http.StatusAccepted {
		t.Fatalf("e1: %d", code)
	}
	if code := postBody(t, e2, "initech", "idem", `{"other":"body"}`); code != http.StatusUnprocessableEntity {
		t.Fatalf("key accepted at e1, reused with another body at e2: %d, want 422", code)
	}
	if code := postBody(t, e2, "initech", "idem", `{"first":"body"}`); code != http.StatusOK {
		t.Fatalf("key accepted at e1, the same body at e2: %d, want 200 duplicate", code)
	}

	// The leaves' `sluice` services count through the hub's owners too.
	c1, err := client.New(e1.n.Conn)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := client.New(e2.n.Conn)
	if err != nil {
		t.Fatal(err)
	}
	slots := protocol.ReserveRequest{Principal: "acme", Key: "slots", Max: 1}
	if rep, err := c1.Reserve(testkit.Context(t), slots); err != nil || !rep.Granted {
		t.Fatalf("reserve through e1: %+v %v", rep, err)
	}
	if rep, err := c2.Reserve(testkit.Context(t), slots); err != nil || rep.Granted || rep.Count != 1 {
		t.Fatalf("reserve through e2: %+v %v, want denied at count 1 (the hub's counter)", rep, err)
	}

	// Cut off: e1 decides alone, with the whole limit, and sends nothing
	// toward the hub's owners (a request there would wait out no
	// responders first).
	var towardHub atomic.Int64
	sub, err := e1.n.Conn.Subscribe("sluice.hub.v1.quota.>", func(*nats.Msg) { towardHub.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	hub.stop()
	testkit.Eventually(t, 10*time.Second, func() bool { return quotaOf(t, e1) == forward.RouteLinkDown }, "e1: link down")
	t0 := time.Now()
	if got := statuses(t, "acme", "split", 12, func(int) *node { return e1 }); got[http.StatusAccepted] != 10 || got[http.StatusTooManyRequests] != 2 {
		t.Fatalf("cut off: %v, want 10 × 202 and 2 × 429 (the edge's own state, the same limit)", got)
	}
	t.Logf("12 hooks decided on the edge in %s", time.Since(t0))
	if err := e1.n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := towardHub.Load(); n != 0 {
		t.Fatalf("%d quota requests sent toward the hub while the link was down", n)
	}
	_, m := getBody(t, e1.h, "/metrics")
	if got := metricSum(m, fallback); got != 12 {
		t.Fatalf("sluice_quota_fallback_total{op=hit} = %v, want 12", got)
	}
	if !strings.Contains(m, "sluice_edge_hub_quota 0") {
		t.Errorf("metrics: %s", grepLines(m, "hub_quota"))
	}
	if _, err := c1.Reserve(testkit.Context(t), slots); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("reserve through a cut-off edge's service: %v, want unavailable", err)
	}

	// Linked again (the hub restarted): the hub's owners decide again,
	// one budget for both leaves.
	hubServes(startNode(t, hubArgs...)) // stopped by the cleanup
	if got := statuses(t, "globex", "rejoined", 16, both); got[http.StatusAccepted] != 10 || got[http.StatusTooManyRequests] != 6 {
		t.Fatalf("linked again: %v, want 10 × 202 and 6 × 429 (one budget)", got)
	}
	_, m = getBody(t, e2.h, "/metrics")
	if !strings.Contains(m, "sluice_edge_hub_quota 1") {
		t.Errorf("metrics: %s", grepLines(m, "hub_quota"))
	}
}

// A leaf whose partition count is not its hub's would be answered
// "misrouted" by every owner: it decides from its own state instead and
// says why.
func TestLeafModePartitionMismatch(t *testing.T) {
	t.Parallel()
	leaf := testkit.FreeAddr(t)
	startNode(t, "--data-dir", t.TempDir(), "--leaf-listen", leaf)
	ed := startNode(t, "--data-dir", t.TempDir(), "--hub-url", "nats-leaf://"+leaf, "--leaf-name", "e1", "--partitions", "8")
	want := "local: the hub's fleet has 4 partitions, this leaf 8 (set --partitions to the hub's)"
	testkit.Eventually(t, 15*time.Second, func() bool { return quotaOf(t, ed) == want }, "readyz: "+want)
	if code, _ := postHook(t, ed.h, "acme", "k"); code != http.StatusAccepted {
		t.Fatalf("hook: %d, want 202 decided by the edge", code)
	}
	_, m := getBody(t, ed.h, "/metrics")
	if !strings.Contains(m, `sluice_quota_fallback_total{op="hit"} 1`) {
		t.Errorf("metrics: %s", grepLines(m, "fallback"))
	}
}

// --split-share n: a leaf deciding alone applies 1/n of each limit, so
// the sides of a split together stay near one limit.
func TestLeafModeSplitShare(t *testing.T) {
	t.Parallel()
	cfgPath := writeLimits(t)
	// No hub listens there: the edge is cut off from the start.
	leaf := testkit.FreeAddr(t)
	ed := startNode(t, "--data-dir", t.TempDir(), "--hub-url", "nats-leaf://"+leaf, "--leaf-name", "e1",
		"--config", cfgPath, "--split-share", "2")
	if got := statuses(t, "acme", "alone", 8, func(int) *node { return ed }); got[http.StatusAccepted] != 5 || got[http.StatusTooManyRequests] != 3 {
		t.Fatalf("cut off, --split-share 2: %v, want 5 × 202 and 3 × 429 (half of the burst of 10)", got)
	}
	if q := quotaOf(t, ed); q != forward.RouteLinkDown {
		t.Fatalf("readyz quota %q", q)
	}
}
