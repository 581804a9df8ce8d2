package fx_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// TestShardsCluster: a 3-node cluster of 3 shards (R1). Hooks of many
// tenants, posted round robin over the nodes, land in their shard's
// stream only, in order; a duplicate Idempotency-Key is answered as a
// duplicate of the first hook whichever node gets it; a claim taken by a
// hit is settled through the owner and read back committed, from its
// shard's bucket only. The shards' leaders are on three servers.
func TestShardsCluster(t *testing.T) { t.Parallel(); testShardsCluster(t, 1) }

// TestShardsClusterR3 is TestShardsCluster at R3: every server holds
// every shard, and the shards' leaders are moved onto three servers.
func TestShardsClusterR3(t *testing.T) { t.Parallel(); testShardsCluster(t, 3) }

// startShardNodes starts a cluster of three nodes with 3 shards (6
// partitions), node i with extra(i) besides.
func startShardNodes(t *testing.T, what string, extra func(i int) []string) []*node {
	var routes []string
	ports := make([]int, 3)
	for i := range 3 {
		ports[i] = testkit.FreePort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i]))
	}
	return testkit.StartTogether(t, 3, 120*time.Second, what, func(i int, log *slog.Logger) (*node, error) {
		return startNodeLog(t, log, append([]string{"--data-dir", filepath.Join(t.TempDir(), fmt.Sprint(i)), "--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"--routes", strings.Join(routes, ","), "--partitions", "6/3", "--store-timeout", "3s"}, extra(i)...)...)
	})
}

func testShardsCluster(t *testing.T, replicas int) {
	nodes := startShardNodes(t, "shard node", func(int) []string { return []string{"--replicas", fmt.Sprint(replicas)} })
	ctx := testkit.Context(t)
	const shards, tenants, per = 3, 12, 4
	ids := map[string][]string{} // tenant -> hook ids in order
	for n := range per {
		for i := range tenants {
			tenant := fmt.Sprintf("t%d", i)
			nd := nodes[(i+n)%3]
			var code int
			var id string
			for try := 0; try < 20; try++ {
				if code, id = postHook(t, nd.h, tenant, fmt.Sprintf("%s-k%d", tenant, n)); code == 202 {
					break
				}
				time.Sleep(100 * time.Millisecond) // a 503 while the cluster settles: sent again, as a sender does
			}
			if code != 202 {
				t.Fatalf("%s hook %d: %d", tenant, n, code)
			}
			ids[tenant] = append(ids[tenant], id)
		}
	}
	js := nodes[0].n.JS
	// Placed (R1) or led (R3): each shard's hooks stream and claims
	// bucket on another server.
	var hooksLeaders, claimsLeaders map[string]bool
	testkit.Eventually(t, 20*time.Second, func() bool {
		hooksLeaders, claimsLeaders = map[string]bool{}, map[string]bool{}
		for k := range shards {
			for name, on := range map[string]map[string]bool{protocol.HooksStream(k): hooksLeaders, "KV_" + protocol.ClaimsBucket("sluice", k): claimsLeaders} {
				st, err := js.Stream(ctx, name)
				if err != nil || st.CachedInfo().Cluster == nil {
					return false
				}
				on[st.CachedInfo().Cluster.Leader] = true
			}
		}
		return len(hooksLeaders) == shards && len(claimsLeaders) == shards
	}, fmt.Sprintf("the shards' leaders on %d servers each (R%d)", shards, replicas))
	// Each partition's owner on its shard's server: the owner of partition
	// p writes its claims to shard p mod 3, led from the owner's own
	// server (the lease assignment follows the shards' balancing rule).
	hctx, hcancel := context.WithTimeout(context.Background(), 40*time.Second) // its own: ctx serves the rest
	defer hcancel()
	leases, err := js.KeyValue(hctx, kvstore.BucketNames("sluice").Leases)
	if err != nil {
		t.Fatal(err)
	}
	var away []string
	home := func() bool {
		away = nil
		for p := range 6 {
			var l struct{ Owner string }
			var m struct{ Server string }
			e, err := leases.Get(hctx, fmt.Sprintf("lease.%d", p))
			if err == nil {
				err = json.Unmarshal(e.Value(), &l)
			}
			if err == nil {
				if e, err = leases.Get(hctx, "member."+protocol.EncodeToken(l.Owner)); err == nil {
					err = json.Unmarshal(e.Value(), &m)
				}
			}
			var st jetstream.Stream
			if err == nil {
				st, err = js.Stream(hctx, "KV_"+protocol.ClaimsBucket("sluice", p%shards))
			}
			if err != nil || st.CachedInfo().Cluster == nil {
				away = append(away, fmt.Sprintf("partition %d: %v", p, err))
				continue
			}
			if leader := st.CachedInfo().Cluster.Leader; m.Server != leader {
				away = append(away, fmt.Sprintf("partition %d owned on %s, shard %d led by %s", p, m.Server, p%shards, leader))
			}
		}
		return len(away) == 0
	}
	for deadline := time.Now().Add(30 * time.Second); !home(); time.Sleep(50 * time.Millisecond) { // polled, as testkit.Eventually does
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: every partition owned on its shard's leader's server: %v", away)
		}
	}
	for k := range shards {
		st, err := js.Stream(ctx, protocol.HooksStream(k))
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		next := map[string]int{}
		for _, m := range testkit.StoredMsgs(t, st) {
			tenant := m.Header.Get(hooks.HeaderTenant)
			if s := protocol.Shard(tenant, shards); s != k {
				t.Fatalf("a hook of %s (shard %d) in %s", tenant, s, protocol.HooksStream(k))
			}
			if got, want := m.Header.Get(hooks.HeaderHookID), ids[tenant][next[tenant]]; got != want {
				t.Fatalf("%s's hook %d in %s is %s, want %s (out of order)", tenant, next[tenant], protocol.HooksStream(k), got, want)
			}
			if !strings.HasPrefix(m.Subject, "sluice.hooks.") {
				t.Fatalf("stored under %s", m.Subject)
			}
			next[tenant]++
		}
		t.Logf("%s: %d hooks, leader %s", protocol.HooksStream(k), info.State.Msgs, info.Cluster.Leader)
	}
	// A duplicate key, at every node: the first hook's id. A 409 (in
	// flight) or 503 is sent again, as a sender does on its Retry-After:
	// at R3 a claim read may come from a replica a step behind the settle
	// (the mover moves leaders meanwhile); a settle really lost stays 409
	// past these 10 s (the pending TTL is 30 s) and fails the test.
	for i := range tenants {
		tenant := fmt.Sprintf("t%d", i)
		for _, nd := range nodes {
			var code int
			var id string
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if code, id = postHook(t, nd.h, tenant, tenant+"-k0"); (code != 409 && code != 503) || time.Now().After(deadline) {
					break
				}
			}
			if code != 200 || id != ids[tenant][0] {
				t.Fatalf("%s's first key again: %d %s, want 200 %s", tenant, code, id, ids[tenant][0])
			}
		}
	}
	// A claim taken by a hit and settled through the owner, on each node.
	for i, nd := range nodes {
		tenant := fmt.Sprintf("c%d", i)
		claim := &protocol.ClaimRequest{Tenant: tenant, Source: "src", Key: "k", HookID: "h-" + tenant}
		var rep protocol.HitReply
		testkit.Eventually(t, 20*time.Second, func() bool {
			var err error
			rep, err = nd.q.Router.Hit(ctx, protocol.HitRequest{Claim: claim})
			return err == nil && rep.Result == protocol.ResultOK
		}, "a hit takes the claim")
		if err := nd.q.Router.Settle(ctx, protocol.SettleRequest{Tenant: tenant, Source: "src", Key: "k", HookID: claim.HookID, Revision: rep.Revision}); err != nil {
			t.Fatalf("settle %s: %v", tenant, err)
		}
		for k := range shards {
			b, err := js.KeyValue(ctx, protocol.ClaimsBucket("sluice", k))
			if err != nil {
				t.Fatal(err)
			}
			keys, err := b.ListKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for key := range keys.Keys() {
				found = found || strings.HasPrefix(key, protocol.EncodeToken(tenant)+".")
			}
			if found != (k == protocol.Shard(tenant, shards)) {
				t.Fatalf("%s (shard %d): in bucket %d %v", tenant, protocol.Shard(tenant, shards), k, found)
			}
		}
	}
	if replicas == 1 {
		stopAShardsServer(t, nodes, shards)
	}
}

// TestShardsClusterMixedSync: an R1 cluster with one node at sync-always
// (as while upgrading to the cluster's group sync, docs/UPGRADES.md) and
// two at synced: every shard's tenants get 202 at a synced node — the
// sync-always server answers the rounds at once.
func TestShardsClusterMixedSync(t *testing.T) {
	t.Parallel()
	nodes := startShardNodes(t, "mixed node", func(i int) []string {
		if i == 2 {
			return []string{"--durability", "sync-always"}
		}
		return nil
	})
	for i := range 12 {
		tenant := fmt.Sprintf("t%d", i)
		testkit.Eventually(t, 20*time.Second, func() bool {
			code, _ := postHook(t, nodes[0].h, tenant, tenant+"-mixed")
			return code == 202 || code == 200
		}, fmt.Sprintf("%s (shard %d) answered 2xx by a synced node beside a sync-always one", tenant, protocol.Shard(tenant, 3)))
	}
}

// stopAShardsServer (R1, synced: the cluster's group sync) stops the node
// whose server holds one shard, and checks that the others' tenants still
// get 202 from the nodes left — a round that cannot confirm the stopped
// server's streams still vouches for the others' — while that shard's do
// not. The server stopped is not the one holding the leases bucket
// (at R1 the owners' leases are on one server: without it no partition
// has an owner, whatever the sync).
func stopAShardsServer(t *testing.T, nodes []*node, shards int) {
	ctx := testkit.Context(t)
	js := nodes[0].n.JS
	leaderOf := func(stream string) string {
		st, err := js.Stream(ctx, stream)
		if err != nil || st.CachedInfo().Cluster == nil {
			t.Fatalf("stream %s: %v", stream, err)
		}
		return st.CachedInfo().Cluster.Leader
	}
	leases := leaderOf(kvstore.StreamName(kvstore.BucketNames("sluice").Leases))
	gone, down := -1, -1
	for k := range shards {
		if on := leaderOf(protocol.HooksStream(k)); on != leases {
			for i, nd := range nodes {
				if nd.n.Server.NATS().Name() == on {
					gone, down = k, i
				}
			}
		}
	}
	if down < 0 {
		t.Fatalf("no node's server holds a shard without the leases bucket (on %s)", leases)
	}
	nodes[down].stop()
	up := nodes[(down+1)%len(nodes)]
	for i := range 12 {
		tenant := fmt.Sprintf("t%d", i)
		key := tenant + "-while-a-server-is-down"
		if protocol.Shard(tenant, shards) == gone {
			if code, _ := postHook(t, up.h, tenant, key); code == 202 {
				t.Fatalf("%s (shard %d, its server stopped): 202", tenant, gone)
			}
			continue
		}
		var id string
		testkit.Eventually(t, 20*time.Second, func() bool {
			var code int
			code, id = postHook(t, up.h, tenant, key)
			return code == 202
		}, fmt.Sprintf("%s (shard %d) answered 202 with the server of shard %d stopped", tenant, protocol.Shard(tenant, shards), gone))
		// Its claim was settled (the owner's settle is vouched for too):
		// a redelivery is a duplicate, not a hook in flight.
		if code, dup := postHook(t, up.h, tenant, key); code != 200 || dup != id {
			t.Fatalf("%s's hook again with a server down: %d %s, want 200 %s", tenant, code, dup, id)
		}
		// And a settle through the tenant's owner is answered ok. Each
		// try a key of its own: a try that timed out may have left its
		// claim pending.
		var claim *protocol.ClaimRequest
		var rep protocol.HitReply
		for try, deadline := 0, time.Now().Add(20*time.Second); ; try++ {
			claim = &protocol.ClaimRequest{Tenant: tenant, Source: "src", Key: fmt.Sprintf("%s-hit-%d", key, try), HookID: "h-" + key}
			var err error
			rep, err = up.q.Router.Hit(ctx, protocol.HitRequest{Claim: claim})
			if err == nil && rep.Result == protocol.ResultOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not within 20s: a hit of %s takes the claim with a server down (the last: %+v %v)", tenant, rep, err)
			}
			time.Sleep(50 * time.Millisecond) // polled, as testkit.Eventually does
		}
		if err := up.q.Router.Settle(ctx, protocol.SettleRequest{Tenant: tenant, Source: "src", Key: claim.Key, HookID: claim.HookID, Revision: rep.Revision}); err != nil {
			t.Fatalf("settle %s with the server of shard %d down: %v", tenant, gone, err)
		}
	}
}

// TestShardsFixedForTheFleet: a node restarted with another shard count
// than its fleet's refuses to start, naming both; one that does not divide
// the partitions is a configuration error; with one shard the streams and
// buckets are those of a node without shards.
func TestShardsFixedForTheFleet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nd := startNode(t, "--data-dir", dir, "--partitions", "6/3")
	for k := range 3 {
		if _, err := nd.n.JS.Stream(testkit.Context(t), protocol.HooksStream(k)); err != nil {
			t.Fatalf("stream of shard %d: %v", k, err)
		}
	}
	nd.stop()
	_, err := startNodeErr(t, "--data-dir", dir, "--partitions", "6/2")
	if !errors.Is(err, quota.ErrShardMismatch) || !strings.Contains(err.Error(), "the fleet has 3 shards, this node is configured with 2") {
		t.Fatalf("restart with 2 shards on a fleet of 3: %v", err)
	}
	t.Log(err)
	if _, err := startNodeErr(t, "--data-dir", t.TempDir(), "--partitions", "6/4"); err == nil || !strings.Contains(err.Error(), "--partitions: 4 shards do not divide 6 partitions") {
		t.Fatalf("6/4: %v", err)
	}
	one := startNode(t, "--data-dir", t.TempDir(), "--partitions", "6/1")
	ctx := testkit.Context(t)
	names := map[string]bool{}
	for name := range one.n.JS.StreamNames(ctx).Name() {
		names[name] = true
	}
	for _, n := range []string{"HOOKS_1", "KV_sluice_claims_1"} {
		if names[n] {
			t.Fatalf("one shard has stream %s", n)
		}
	}
	st, err := one.n.JS.Stream(ctx, "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.SubjectTransform != nil || len(c.Subjects) != 1 || c.Subjects[0] != "sluice.hooks.>" {
		t.Fatalf("one shard's HOOKS: %+v", c)
	}
	if _, err := one.n.JS.KeyValue(ctx, "sluice_claims"); err != nil {
		t.Fatal(err)
	}
}

// TestLeafModeShardedHub: a leaf (one outbox) of a hub of 2 shards reads
// the hub's shard count from its fleet record and forwards each hook to
// its tenant's shard's stream on the hub, every acknowledged hook once;
// its claims are in the hub's shard buckets, so the hub answers a leaf
// hook's key as a duplicate of the edge's hook.
func TestLeafModeShardedHub(t *testing.T) {
	t.Parallel()
	leaf := testkit.FreeAddr(t)
	hub := startNode(t, "--data-dir", t.TempDir(), "--leaf-listen", leaf, "--partitions", "4/2", "--store-timeout", "1s")
	ed := startNode(t, "--data-dir", t.TempDir(), "--hub-url", "nats-leaf://"+leaf, "--leaf-name", "e1", "--store-timeout", "1s")
	testkit.Eventually(t, 10*time.Second, ed.n.Server.LeafConnected, "edge linked to the hub")
	acked := postMany(t, ed.h, "sh", 200)
	waitOutboxDrained(t, ed, 30*time.Second)
	ctx := testkit.Context(t)
	seen := map[string]int{}
	for k := range 2 {
		st, err := hub.n.JS.Stream(ctx, protocol.HooksStream(k))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testkit.StoredMsgs(t, st) {
			tenant := m.Header.Get(hooks.HeaderTenant)
			if s := protocol.Shard(tenant, 2); s != k {
				t.Fatalf("a hook of %s (shard %d) in the hub's %s", tenant, s, protocol.HooksStream(k))
			}
			if m.Subject != protocol.HookSubject("sluice", tenant, "src") {
				t.Fatalf("stored under %s", m.Subject)
			}
			seen[m.Header.Get(hooks.HeaderHookID)]++
		}
	}
	for _, id := range acked {
		if seen[id] != 1 {
			t.Fatalf("hook %s is %d times on the hub", id, seen[id])
		}
	}
	for i := range 8 { // key sh-i is tenant t<i>'s
		code, id := postHook(t, hub.h, fmt.Sprintf("t%d", i), fmt.Sprintf("sh-%d", i))
		if code != 200 || seen[id] != 1 {
			t.Fatalf("t%d's edge key at the hub: %d %s", i, code, id)
		}
	}
}
