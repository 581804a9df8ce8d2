//go:build unix

package events_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/testkit"
)

// BenchmarkClaimLife measures a hook's claim life (Claim, then SettleOwn
// with a 1 s TTL, so claims also expire during the run) at 64 in flight,
// on the claims bucket with expiry events (markers and a running
// ExpiryWatcher, --claim-expiry-events) and without (the default):
//
//	go test -run '^$' -bench ClaimLife -count 6 ./events/
func BenchmarkClaimLife(b *testing.B) {
	for _, on := range []bool{true, false} {
		name := "expiry-events=off"
		if on {
			name = "expiry-events=on"
		}
		b.Run(name, func(b *testing.B) {
			k := testkit.New(b)
			ctx := context.Background()
			bucket := "bench_claims"
			s := testkit.ClaimsKV(b, k.Bucket(b, claims.BucketConfig(bucket, 1, claims.WithExpiryEvents(on))))
			if on {
				pub, err := events.NewPublisher(k.Conn, prefix)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(pub.Close)
				w, err := events.NewExpiryWatcher(k.JS, bucket, pub)
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Start(ctx); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(w.Stop)
			}
			testkit.InFlight(b, 64, func(i int) error {
				cid := claims.ID{Tenant: "acme", Source: "gh", Key: strconv.Itoa(i)}
				r, err := s.Claim(ctx, cid, "hook", 30*time.Second)
				if err == nil {
					err = s.SettleOwn(ctx, cid, "hook", "", r.Revision, time.Second)
				}
				return err
			})
		})
	}
}

// BenchmarkLifecycleEvents measures what the lifecycle events of one hook
// cost (claim.pending, hook.stored, claim.committed through a Publisher,
// nobody subscribed) in process CPU, the in-process server's share of
// handling them included: compare cpu-µs/hook with the edge's whole hook
// (fx's BenchmarkEdgeHooks).
//
//	go test -run '^$' -bench LifecycleEvents -count 6 ./events/
func BenchmarkLifecycleEvents(b *testing.B) {
	k := testkit.New(b)
	pub, err := events.NewPublisher(k.Conn, prefix, events.WithQueueSize(1<<16))
	if err != nil {
		b.Fatal(err)
	}
	id := claims.ID{Tenant: "acme", Source: "github", Key: "0f2c9a2e-6d1b-4c4e-9a51-3e1f1d2b7c11"}
	cpu0 := testkit.CPUTime(b)
	b.ResetTimer()
	for i := range b.N {
		pub.ClaimPending(id, "hook-"+strconv.Itoa(i), uint64(i+1))
		pub.HookStored(id.Tenant, id.Source, id.Key, "hook-"+strconv.Itoa(i))
		pub.ClaimCommitted(id, "hook-"+strconv.Itoa(i), uint64(i+2))
		if i%1024 == 1023 {
			pub.Close() // drains the queue: every event handed to the connection
			if pub, err = events.NewPublisher(k.Conn, prefix, events.WithQueueSize(1<<16)); err != nil {
				b.Fatal(err)
			}
		}
	}
	pub.Close()
	if err := k.Conn.Flush(); err != nil { // the server has read them all
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64((testkit.CPUTime(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/hook")
}
