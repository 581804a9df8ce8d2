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
			s := claims.NewKV(k.Bucket(b, claims.BucketConfig(bucket, claims.BucketOptions{Replicas: 1, ExpiryEvents: on})))
			if on {
				pub, err := events.NewPublisher(k.Conn, prefix, nil)
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
					err = s.SettleOwn(ctx, cid, "hook", r.Revision, time.Second)
				}
				return err
			})
		})
	}
}
