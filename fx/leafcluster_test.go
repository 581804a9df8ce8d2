package fx_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/testkit"
)

// A leaf of a hub cluster of three: it lists every hub
// node's leaf URL; the hub node it is linked to goes away under load, the
// edge keeps answering 202 and relinks to another node, where the hub's
// owners decide its limits again (the hub maps the edge's owner subjects
// on every node); every acked hook is in the hub's R3 HOOKS once.
func TestLeafModeHubCluster(t *testing.T) {
	t.Parallel()
	var routes, leafs []string
	routePorts := make([]int, 3)
	for i := range 3 {
		routePorts[i] = testkit.FreePort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", routePorts[i]))
		leafs = append(leafs, testkit.FreeAddr(t))
	}
	hubs := testkit.StartTogether(t, 3, 120*time.Second, "hub node", func(i int, log *slog.Logger) (*node, error) {
		return startNodeLog(t, log, "--data-dir", filepath.Join(t.TempDir(), fmt.Sprint(i)), "--cluster-listen", fmt.Sprintf("127.0.0.1:%d", routePorts[i]),
			"--routes", strings.Join(routes, ","), "--replicas", "3",
			"--leaf-listen", leafs[i])
	})
	urls := make([]string, 3)
	for i, l := range leafs {
		urls[i] = "nats-leaf://" + l
	}
	// A budget no hit outlasts on a loaded machine: a hit the owners
	// answer late would be decided on the edge.
	ed := startNode(t, "--data-dir", t.TempDir(), "--hub-url", strings.Join(urls, ","), "--leaf-name", "e1",
		"--store-timeout", "3s")
	testkit.Eventually(t, 20*time.Second, func() bool { return quotaOf(t, ed) == forward.RouteHub }, "the hub decides the edge's limits")
	linkedTo := func() int {
		for i, h := range hubs {
			if h != nil && h.n.Server.NATS().NumLeafNodes() > 0 {
				return i
			}
		}
		return -1
	}
	fallback := regexp.MustCompile(`(?m)^sluice_quota_fallback_total\{op="hit"\} (\S+)$`)
	local := func() float64 {
		_, m := getBody(t, ed.h, "/metrics")
		return metricSum(m, fallback)
	}
	var acked []string
	// Once the hub's live owners know each other and serve every
	// partition once (a start or a takeover takes a few lease rounds), no
	// hit is decided on the edge.
	hubDecides := func(what string) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() bool {
			var live []*node
			for _, h := range hubs {
				if h != nil {
					live = append(live, h)
				}
			}
			served := map[int]int{}
			for _, h := range live {
				if h.q.Worker.Members() != len(live) {
					return false
				}
				for _, p := range h.q.Worker.Partitions() {
					served[p]++
				}
			}
			for p := range 4 {
				if served[p] != 1 {
					return false
				}
			}
			return true
		}, what+": every partition served once by the hub's live owners")
		// The hub decides: a round of 100 hits none of which the edge
		// decided itself. A hit whose owner call ran out of its budget
		// (a loaded machine, a stream leader just elected) is decided on
		// the edge as documented, so rounds are sent until one is clean.
		deadline := time.Now().Add(30 * time.Second)
		for round := 0; ; round++ {
			before := local()
			acked = append(acked, postMany(t, ed.h, fmt.Sprintf("%s-%d", what, round), 100)...)
			n := local() - before
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still %v of 100 hits decided on the edge after %d rounds", what, n, round+1)
			}
			t.Logf("%s: round %d: %v of 100 hits decided on the edge", what, round, n)
		}
	}
	hubDecides("linked")

	// The hub node the edge is linked to stops (a rolling restart), while
	// hooks keep coming: every one is 202.
	var gone int
	testkit.Eventually(t, 10*time.Second, func() bool { gone = linkedTo(); return gone >= 0 }, "a hub node holds the leaf connection")
	during := make(chan []string, 1)
	go func() { during <- postMany(t, ed.h, "during", 200) }()
	hubs[gone].stop()
	hubs[gone] = nil
	acked = append(acked, <-during...)
	testkit.Eventually(t, 20*time.Second, func() bool {
		return linkedTo() >= 0 && quotaOf(t, ed) == forward.RouteHub
	}, "relinked to another hub node, the hub deciding the edge's limits")
	hubDecides("relinked")

	other := hubs[(gone+1)%3]
	waitOutboxDrained(t, ed, 30*time.Second)
	// Read from a node that stayed; a read during the stream's leader
	// election after the stop may come back short: read again.
	var seen map[string]int
	testkit.Eventually(t, 30*time.Second, func() bool {
		s, err := readHubHooks(testkit.Context(t), other.n.JS)
		if err != nil {
			t.Logf("reading the hub's HOOKS: %v", err)
			return false
		}
		seen = s
		return true
	}, "the hub's HOOKS read")
	for _, id := range acked {
		if seen[id] != 1 {
			t.Errorf("hook %s stored %d times on the hub", id, seen[id])
		}
	}
	if len(seen) != len(acked) {
		t.Errorf("the hub holds %d hooks, %d were acked", len(seen), len(acked))
	}
}
