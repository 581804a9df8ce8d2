package fx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

type shardMapBody struct {
	Shards int `json:"shards"`
	Map    []struct {
		Shard      int    `json:"shard"`
		Node       string `json:"node"`
		HTTP       string `json:"http"`
		StreamsLed bool   `json:"streams_led"`
	} `json:"map"`
}

// getShards is GET /v1/shards of node nd (query appended).
func getShards(t *testing.T, nd *node, query string, v any) int {
	t.Helper()
	res, err := http.Get("http://" + *nd.h.Addr.Load() + "/v1/shards" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode == 200 {
		if err := json.NewDecoder(res.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return res.StatusCode
}

// TestShardMap: every node of a 3-node, 3-shard R3 cluster answers GET
// /v1/shards with each shard's hooks-stream leader and that node's own
// HTTP address, and names the new leader once a leader moves.
func TestShardMap(t *testing.T) {
	t.Parallel()
	nodes := startShardNodes(t, "shard map node", func(int) []string { return []string{"--replicas", "3"} })
	js := nodes[0].n.JS
	httpOf := map[string]string{} // server name -> the node's HTTP address
	for _, nd := range nodes {
		httpOf[nd.n.Server.NATS().Name()] = *nd.h.Addr.Load()
	}
	var noLeader string
	leaders := func() []string {
		// Each read its own deadline: testkit.Context's 30 s from the
		// test's start may be over by the leader's move.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var out []string
		for k := range 3 {
			st, err := js.Stream(ctx, protocol.HooksStream(k))
			if err != nil || st.CachedInfo().Cluster == nil || st.CachedInfo().Cluster.Leader == "" {
				noLeader = fmt.Sprintf("shard %d: %v", k, err)
				return nil
			}
			out = append(out, st.CachedInfo().Cluster.Leader)
		}
		return out
	}
	// agrees: every node names each shard's leader and its address.
	var last string
	agrees := func() bool {
		want := leaders()
		if want == nil {
			last = "a shard without a leader"
			return false
		}
		for i, nd := range nodes {
			var b shardMapBody
			if code := getShards(t, nd, "", &b); code != 200 || b.Shards != 3 || len(b.Map) != 3 {
				last = fmt.Sprintf("node%d: %d %+v", i, code, b)
				return false
			}
			for k, e := range b.Map {
				if e.Shard != k || e.Node != want[k] || e.HTTP != httpOf[want[k]] {
					last = fmt.Sprintf("node%d shard %d: %+v, want leader %s at %s", i, k, e, want[k], httpOf[want[k]])
					return false
				}
			}
		}
		return true
	}
	waitFor(t, 30*time.Second, func() (bool, string) { return agrees(), last }, "every node's /v1/shards names each shard's leader and its HTTP address")
	for _, tenant := range []string{"t0", "t1", "t2", "t3"} {
		var one struct {
			Tenant string `json:"tenant"`
			Shard  int    `json:"shard"`
			HTTP   string `json:"http"`
		}
		if code := getShards(t, nodes[1], "?tenant="+tenant, &one); code != 200 || one.Tenant != tenant || one.Shard != protocol.Shard(tenant, 3) || one.HTTP == "" {
			t.Fatalf("?tenant=%s: %d %+v, want shard %d", tenant, code, one, protocol.Shard(tenant, 3))
		}
	}
	for _, q := range []string{"?tenant=", "?tenant=a&tenant=b", "?other=1", "?tenant=a/b"} {
		if code := getShards(t, nodes[0], q, &struct{}{}); code != 400 {
			t.Fatalf("%s: %d, want 400", q, code)
		}
	}
	// A leader moves: the node leading shard 0 stops; the other two
	// name shard 0's new leader (R3: one of them) and its address.
	before := leaders()[0]
	down := -1
	for i, nd := range nodes {
		if nd.n.Server.NATS().Name() == before {
			down = i
		}
	}
	if down < 0 {
		t.Fatalf("shard 0's leader %s is no node's server", before)
	}
	nodes[down].stop()
	nodes = append(nodes[:down:down], nodes[down+1:]...)
	js = nodes[0].n.JS
	waitFor(t, 60*time.Second, func() (bool, string) {
		if now := leaders(); now == nil || now[0] == before {
			return false, fmt.Sprintf("shard 0 led by %v (%s)", now, noLeader)
		}
		return agrees(), last
	}, "shard 0 led by another server than "+before+", named by every node left")
}

// waitFor polls cond until it holds, failing the test with what and cond's
// last word after d.
func waitFor(t *testing.T, d time.Duration, cond func() (bool, string), what string) {
	t.Helper()
	var why string
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		var ok bool
		if ok, why = cond(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s (last: %s)", d, what, why)
		}
	}
}
