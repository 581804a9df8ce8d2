package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// TestGrowCluster grows an embedded cluster of 3 nodes, 6 shards at R3,
// to 6 nodes under load without restarting the first three, and checks
// that the shards spread (each new server takes 3 replicas and 1 leader
// of the hooks streams and of the claims buckets, shard k's stream and
// bucket on the same servers), that every hook answered 2xx is in its
// shard's stream, once, with one winner per key, and logs how long the
// move took and what the senders saw meanwhile.
func TestGrowCluster(t *testing.T) { t.Parallel(); testGrowCluster(t, 3) }

// TestGrowClusterR1 is TestGrowCluster at R1: each new server takes 1
// shard (a stream update moving it by its placement tag).
func TestGrowClusterR1(t *testing.T) { t.Parallel(); testGrowCluster(t, 1) }

func testGrowCluster(t *testing.T, replicas int) {
	const shards = 6
	h := Start(t, Options{Embedded: true, Partitions: 12, Shards: shards, Replicas: replicas})
	l := NewLedger()
	run := h.startHooks(l, hookLoad{Tenants: shardTenants(shards, 2), Workers: 12, Redeliver: true})
	defer run.stop()
	killStep(t, run, "before the growth")
	h.waitBalanced(t, 3, 60*time.Second)
	killStep(t, run, "on 3 nodes")
	before, calm := l.Codes(), run.takeLatencies()
	t.Logf("on 3 nodes: latency p50 %v p99 %v max %v", pct(calm, 50), pct(calm, 99), pct(calm, 100))
	start := time.Now()
	h.AddNodes(t, 3)
	joined := time.Since(start)
	moved := h.waitBalanced(t, 6, scaleD(150*time.Second)) + joined
	codes, lat := l.Codes(), run.takeLatencies()
	for c, n := range before {
		codes[c] -= n
	}
	t.Logf("grown to 6 nodes: nodes ready %v after the start, shards spread %v after it; meanwhile answers by status %v, latency p50 %v p99 %v max %v",
		joined.Round(time.Millisecond), moved.Round(time.Millisecond), codes, pct(lat, 50), pct(lat, 99), pct(lat, 100))
	killStep(t, run, "after the growth")
	run.stop()
	t.Logf("load: %s", run)
	h.CheckHooks(t, l, false)
	moves := map[string]int{}
	for _, nd := range h.Nodes() {
		for _, p := range nd.procs {
			moves[p.name] += strings.Count(p.out.text(), `"msg":"shards: moving`)
		}
	}
	t.Logf("shard moves and leader step-downs requested, by node: %v", moves)
	h.LogSummary(t)
}

// shardTenants are per tenants in each of the shards.
func shardTenants(shards, per int) []string {
	var tenants []string
	n := map[int]int{}
	for i := 0; len(tenants) < per*shards; i++ {
		ten := fmt.Sprintf("t%d", i)
		if k := protocol.Shard(ten, shards); n[k] < per {
			n[k]++
			tenants = append(tenants, ten)
		}
	}
	return tenants
}

// waitBalanced waits until the shards' hooks streams and claims buckets
// are spread evenly over the cluster's servers: each stream current with
// its R replicas, no move in flight, each of the servers holding S·R/N
// replicas and leading S/N of the hooks streams and of the buckets alike,
// and shard k's stream and bucket on the same servers with the same
// leader. It returns how long it waited.
func (h *Harness) waitBalanced(t testing.TB, servers int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	js := h.JS()
	S, R := h.o.Shards, h.o.Replicas
	var last error
	for time.Since(start) < timeout {
		last = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for _, kind := range []string{"hooks", "claims"} {
				held, led := map[string]int{}, map[string]int{}
				for k := range S {
					name, twin := protocol.HooksStream(k), "KV_"+protocol.ClaimsBucket("sluice", k)
					if kind == "claims" {
						name, twin = twin, name
					}
					info, err := h.streamCurrent(ctx, js, name)
					if err != nil {
						return err
					}
					if info.Cluster.Desired != nil {
						return fmt.Errorf("%s: a move in flight", name)
					}
					members := []string{info.Cluster.Leader}
					for _, r := range info.Cluster.Replicas {
						members = append(members, r.Name)
					}
					for _, m := range members {
						held[m]++
					}
					led[info.Cluster.Leader]++
					st, err := js.Stream(ctx, twin)
					if err != nil {
						return err
					}
					tw := st.CachedInfo().Cluster
					twm := []string{tw.Leader}
					for _, r := range tw.Replicas {
						twm = append(twm, r.Name)
					}
					slices.Sort(members)
					slices.Sort(twm)
					if !slices.Equal(members, twm) || tw.Leader != info.Cluster.Leader {
						return fmt.Errorf("%s on %v led by %s, %s on %v led by %s", name, members, info.Cluster.Leader, twin, twm, tw.Leader)
					}
				}
				if len(held) != servers || len(led) != servers {
					return fmt.Errorf("%s streams on %d servers, led by %d (want %d): %v, leaders %v", kind, len(held), len(led), servers, held, led)
				}
				for s, n := range held {
					if n != S*R/servers || led[s] != S/servers {
						return fmt.Errorf("%s streams unbalanced: replicas per server %v, leaders %v", kind, maps.Clone(held), led)
					}
				}
			}
			return nil
		}()
		if last == nil {
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("shards not spread over %d servers within %v: %v", servers, timeout, last)
	return 0
}
