package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// allowSource dedupes on X-Event-Id and admits only clients in allow.
type allowSource struct{ allow netip.Prefix }

func (p allowSource) Source(string, string) (Source, error) {
	s, _ := keyedSource.Source("", "")
	s.IPAllow = []netip.Prefix{p.allow}
	return s, nil
}

// handoffNode is one Handler of TestHandOff: its own hook store and ids
// ("<name>-<n>"), the shared owner and claims of the Kit.
type handoffNode struct {
	h     *Handler
	hooks *nopStorer
	reg   *prometheus.Registry
}

func (n *handoffNode) handoffs(t *testing.T, result string) float64 {
	return testkit.MetricValue(t, n.reg, "sluice_edge_handoffs_total", map[string]string{"result": result})
}

// TestHandOff: a hook posted to node a for a shard led beside node b is
// served by b (b stores it and names it; a stores nothing) and a answers
// with b's answer, a duplicate of its key included. The client's address
// travels with it (b's ip_allow sees the real client; a header claiming
// another address is dropped). With no node serving the leader's subject
// the hook is served where it arrived; with a node that does not answer in
// the budget it is answered 503 with Retry-After and never served twice.
// A handed-off request for anything but a hook is refused.
func TestHandOff(t *testing.T) {
	k := testkit.New(t)
	store, c := realOwner(t, k)
	leader := atomic.Value{}
	leader.Store("b")
	start := func(name string) *handoffNode {
		var ids atomic.Int64
		n := &handoffNode{hooks: &nopStorer{}, reg: prometheus.NewRegistry()}
		h, err := New(Config{
			Policy: allowSource{allow: netip.MustParsePrefix("192.0.2.0/24")}, Admitter: c, Claims: store, Hooks: n.hooks,
			Limits: func(string) (Limits, string) {
				return Limits{Hooks: Rate{Rate: 1000, Burst: 1000}, Bytes: Rate{Rate: 1e9, Burst: 1e9}}, OriginDefault
			},
			StoreTimeout: 50 * time.Millisecond, PublishTimeout: 100 * time.Millisecond,
			Handoff: &Handoff{Conn: k.Conn, Prefix: "sluice", Shards: 3, Self: name,
				Leader: func(int) string { return leader.Load().(string) }},
			NewID:    func() string { return fmt.Sprintf("%s-%d", name, ids.Add(1)) },
			Gatherer: n.reg, Registerer: n.reg,
		})
		if err != nil {
			t.Fatal(err)
		}
		n.h = h
		return n
	}
	a, b := start("a"), start("b")
	stop, err := b.h.ServeHandoffs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	post := func(n *handoffNode, key, remote string, hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/hooks/acme/api", strings.NewReader(`{"n":1}`))
		r.RemoteAddr = remote
		r.Header.Set("X-Event-Id", key)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		n.h.ServeHTTP(rec, r)
		return rec
	}

	rec := post(a, "k1", "192.0.2.7:4000", nil)
	id := rec.Header().Get("X-Hook-Id")
	if rec.Code != http.StatusAccepted || !strings.HasPrefix(id, "b-") {
		t.Fatalf("handed off: %d %q %s, want 202 from b", rec.Code, id, rec.Body)
	}
	if a.hooks.n.Load() != 0 || b.hooks.n.Load() != 1 || a.handoffs(t, "handed") != 1 {
		t.Fatalf("stored by a %d, by b %d; a handed %v: want 0, 1, 1", a.hooks.n.Load(), b.hooks.n.Load(), a.handoffs(t, "handed"))
	}
	if rec.Header().Get("X-Request-Id") == "" || rec.Header().Get(protocol.HeaderHandoffStatus) != "" {
		t.Fatalf("answer headers: %v", rec.Header())
	}
	if rec := post(a, "k1", "192.0.2.7:4000", nil); rec.Code != http.StatusOK || rec.Header().Get("X-Hook-Id") != id {
		t.Fatalf("the key again: %d %q, want 200 %s", rec.Code, rec.Header().Get("X-Hook-Id"), id)
	}
	// The client's own address decides, not a header saying otherwise.
	if rec := post(a, "k2", "198.51.100.9:4000", map[string]string{protocol.HeaderHandoffRemote: "192.0.2.7:1"}); rec.Code != http.StatusForbidden {
		t.Fatalf("a client outside ip_allow, claiming another address: %d %s, want 403", rec.Code, rec.Body)
	}
	if b.hooks.n.Load() != 1 {
		t.Fatalf("b stored %d hooks, want 1", b.hooks.n.Load())
	}

	// No node beside the leader: served here.
	leader.Store("c")
	if rec := post(a, "k3", "192.0.2.7:4000", nil); rec.Code != http.StatusAccepted || !strings.HasPrefix(rec.Header().Get("X-Hook-Id"), "a-") || a.handoffs(t, "no_node") != 1 {
		t.Fatalf("no node beside the leader: %d %q (no_node %v), want 202 from a", rec.Code, rec.Header().Get("X-Hook-Id"), a.handoffs(t, "no_node"))
	}

	// A node that takes the hook and never answers: 503, not served here.
	silent, err := k.Conn.Subscribe(protocol.HandoffSubject("sluice", "d"), func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Unsubscribe() })
	if err := k.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	leader.Store("d")
	before := a.hooks.n.Load()
	if rec := post(a, "k4", "192.0.2.7:4000", nil); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || a.handoffs(t, "failed") != 1 {
		t.Fatalf("a silent node: %d Retry-After %q (failed %v), want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"), a.handoffs(t, "failed"))
	}
	if a.hooks.n.Load() != before {
		t.Fatal("a hook handed to a silent node was stored here too")
	}

	// Only hooks are served for another node.
	for _, uri := range []string{"/v1/admin/limits/acme", "/metrics", "http://evil/v1/hooks/acme/api"} {
		m := nats.NewMsg(protocol.HandoffSubject("sluice", "b"))
		m.Header.Set(protocol.HeaderHandoffMethod, http.MethodPost)
		m.Header.Set(protocol.HeaderHandoffURI, uri)
		rep, err := k.Conn.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.Header.Get(protocol.HeaderHandoffStatus); got != "400" || !bytes.Contains(rep.Data, []byte("invalid_request")) {
			t.Fatalf("%s handed off: %s %s, want 400 invalid_request", uri, got, rep.Data)
		}
	}
}
