package owner

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// BenchmarkHit measures one quota.Router.Hit round trip against one worker on an
// in-process nats-server (file-backed JetStream): charges only (GCRA in the
// owner's memory) and hit+claim (plus one KV create), serially and with 64
// calls in flight, for a coalescing client (batch frames, the default) and
// one that sends a JSON request per hit (quota.WithCoalescing(false): clients
// before frames), and one made quota.WithLocalOwner (the worker in process, as
// the edge and the service call it), so that one run compares them. It
// reports the process's CPU per hit (client, owner and server together).
//
//	go test -run '^$' -bench BenchmarkHit -benchtime 3s ./quota/
func BenchmarkHit(b *testing.B) {
	k, e := kitEnv(b)
	w := e.startWorker(b, k.Conn)
	waitServed(b, 10*time.Second, w)
	cnc := connect(b, k)
	clients := map[string]*quota.Router{
		"frames": e.client(b, cnc, quota.WithBudget(5*time.Second)),
		"json":   e.client(b, cnc, quota.WithBudget(5*time.Second), quota.WithCoalescing(false)),
		"local":  e.client(b, cnc, quota.WithBudget(5*time.Second), quota.WithLocalOwner(w)),
	}

	const tenants = 1024
	names := make([]string, tenants)
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
	}
	// A limit nothing in the benchmark exhausts: every hit is allowed.
	charge := func(tenant string) []protocol.Charge {
		return []protocol.Charge{{Kind: protocol.KindHooks, Tenant: tenant, IncrementUs: 1, CapacityUs: 1 << 50}}
	}
	var seq atomic.Int64
	hit := func(c *quota.Router, withClaim bool) error {
		n := seq.Add(1)
		tenant := names[n%tenants]
		r := protocol.HitRequest{Charges: charge(tenant)}
		if withClaim {
			id := strconv.FormatInt(n, 36)
			r.Claim = &protocol.ClaimRequest{Tenant: tenant, Source: "bench", Key: id, HookID: id}
		}
		rep, err := c.Hit(context.Background(), r)
		if err == nil && rep.Result != protocol.ResultOK {
			b.Fatalf("hit: %+v", rep)
		}
		return err
	}
	for _, mode := range []struct {
		name  string
		claim bool
	}{{"charges", false}, {"claim", true}} {
		for _, cname := range []string{"frames", "json", "local"} {
			c := clients[cname]
			b.Run(mode.name+"/"+cname+"/serial", func(b *testing.B) {
				cpu0 := testkit.CPUTime(b)
				for b.Loop() {
					if err := hit(c, mode.claim); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
				testkit.ReportCPU(b, cpu0)
			})
			b.Run(mode.name+"/"+cname+"/inflight64", func(b *testing.B) {
				var f0, i0 int64
				if c.Coalescer() != nil {
					f0, i0 = c.Coalescer().Frames(), c.Coalescer().Items()
				}
				cpu0 := testkit.CPUTime(b)
				b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := hit(c, mode.claim); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hits/s")
				testkit.ReportCPU(b, cpu0)
				if c.Coalescer() != nil {
					if f := c.Coalescer().Frames() - f0; f > 0 {
						b.ReportMetric(float64(c.Coalescer().Items()-i0)/float64(f), "hits/frame")
					}
				}
			})
		}
	}
}

// BenchmarkClaimCreate compares the two ways an owner can keep 64 claim
// creates in flight (docs/DESIGN.md "Claims in KV"): 64 goroutines each doing a
// synchronous create (kvstore.Bucket.Create: what claims.KV does), and one
// goroutine keeping 64 async publishes in flight
// (jetstream.PublishMsgAsync with expected-last-subject-sequence 0 and a
// TTL: the same write), on an in-process server.
//
//	go test -run '^$' -bench BenchmarkClaimCreate -benchtime 2s -count 5 ./quota/
func BenchmarkClaimCreate(b *testing.B) {
	k, e := kitEnv(b)
	cnc := connect(b, k)
	js := testkit.JetStream(b, cnc)
	var seq atomic.Int64
	val := []byte(`{"s":"p","h":"hook"}`)
	ttl := 30 * time.Second
	b.Run("sync64", func(b *testing.B) {
		b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := "k" + strconv.FormatInt(seq.Add(1), 36)
				if _, _, err := e.claims.Create(context.Background(), key, val, ttl); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
	})
	b.Run("async64", func(b *testing.B) {
		window := make(chan jetstream.PubAckFuture, 64)
		done := make(chan error, 1)
		go func() {
			for f := range window {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					done <- err
					for range window {
					}
					return
				}
			}
			done <- nil
		}()
		for b.Loop() {
			key := "k" + strconv.FormatInt(seq.Add(1), 36)
			m := &nats.Msg{Subject: e.claims.Subject(key), Data: val}
			f, err := js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(0), jetstream.WithMsgTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			window <- f
		}
		close(window)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
	})
}
