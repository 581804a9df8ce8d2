package claims_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// inFlight is testkit.InFlight.
var inFlight = testkit.InFlight

// benchBucket opens a fresh bucket and deletes it after the run, so that
// the expiry of one run's claims does not load the server during the next.
func benchBucket(b *testing.B, k *testkit.Kit, cfg kvstore.BucketConfig) *kvstore.Bucket {
	bk := k.Bucket(b, cfg)
	b.Cleanup(func() {
		if err := k.JS.DeleteKeyValue(context.Background(), cfg.Name); err != nil {
			b.Errorf("delete bucket %s: %v", cfg.Name, err)
		}
	})
	return bk
}

// runSeq makes every benchmark run use fresh keys (a benchmark function
// runs several times with growing b.N).
var runSeq atomic.Int64

// BenchmarkKV measures the KV stores on an in-process embedded server with
// file storage:
//
//	go test -run='^$' -bench=. -benchtime=2s ./claims/
func BenchmarkKV(b *testing.B) {
	k := testkit.New(b)
	ctx := context.Background()
	for _, n := range []int{1, 64} {
		for _, claim := range []struct {
			name  string
			async bool
		}{{"Claim", false}, {"ClaimAsyncPersist", true}} { // --claims-persist sync, async
			b.Run(fmt.Sprintf("%s/inflight=%d", claim.name, n), func(b *testing.B) {
				cfg := kvstore.BucketConfig{Name: bucketName("bench_claims"), AsyncPersist: claim.async}
				s := newKV(b, benchBucket(b, k, cfg))
				run := strconv.FormatInt(runSeq.Add(1), 10)
				inFlight(b, n, func(i int) error {
					r, err := s.Claim(ctx, id("acme", "gh", run+"-"+strconv.Itoa(i)), "hook", 30*time.Second)
					if err == nil && r.Outcome != claims.OK {
						err = fmt.Errorf("claim %d: %v", i, r.Outcome)
					}
					return err
				})
			})
		}
		for _, settle := range []struct {
			name string
			fn   func(*claims.KV, context.Context, claims.ID, string, uint64, time.Duration) error
		}{{"Settle", (*claims.KV).Settle}, {"SettleOwn", func(s *claims.KV, ctx context.Context, id claims.ID, hookID string, rev uint64, ttl time.Duration) error {
			return s.SettleOwn(ctx, id, hookID, "", rev, ttl)
		}}} {
			b.Run(fmt.Sprintf("%s/inflight=%d", settle.name, n), func(b *testing.B) {
				s := newKV(b, benchBucket(b, k, kvstore.BucketConfig{Name: bucketName("bench_settle")}))
				run := strconv.FormatInt(runSeq.Add(1), 10)
				key := func(i int) claims.ID { return id("acme", "gh", run+"-"+strconv.Itoa(i)) }
				revs := make([]uint64, b.N)
				inFlight(b, 64, func(i int) error { // setup, timed again below
					r, err := s.Claim(ctx, key(i), "hook", time.Minute)
					revs[i] = r.Revision
					return err
				})
				inFlight(b, n, func(i int) error {
					return settle.fn(s, ctx, key(i), "hook", revs[i], time.Hour)
				})
			})
		}
		b.Run(fmt.Sprintf("ReplayClaim/inflight=%d", n), func(b *testing.B) {
			r := newKVReplay(b, benchBucket(b, k, claims.ReplayBucketConfig(bucketName("bench_replay"), 10_000_000, 1)))
			run := strconv.FormatInt(runSeq.Add(1), 10)
			until := time.Now().Add(time.Hour).Unix()
			inFlight(b, n, func(i int) error {
				o, err := r.Claim(ctx, "acme/stripe", run+"-"+strconv.Itoa(i), until)
				if err == nil && o != protocol.Claimed {
					err = fmt.Errorf("replay claim %d: %v", i, o)
				}
				return err
			})
		})
	}
}

// BenchmarkClaimStreams spreads claims over K buckets (K streams, each
// with its own write loop in the server), 64 in flight, to tell what
// K claim streams would buy on this machine:
//
//	go test -run '^$' -bench ClaimStreams -benchtime 2s -count 6 ./claims/
func BenchmarkClaimStreams(b *testing.B) {
	k := testkit.New(b)
	ctx := context.Background()
	for _, streams := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("K=%d", streams), func(b *testing.B) {
			stores := make([]*claims.KV, streams)
			for i := range stores {
				stores[i] = newKV(b, benchBucket(b, k, kvstore.BucketConfig{Name: bucketName("bench_streams")}))
			}
			run := strconv.FormatInt(runSeq.Add(1), 10)
			inFlight(b, 64, func(i int) error {
				r, err := stores[i%streams].Claim(ctx, id("acme", "gh", run+"-"+strconv.Itoa(i)), "hook", 30*time.Second)
				if err == nil && r.Outcome != claims.OK {
					err = fmt.Errorf("claim %d: %v", i, r.Outcome)
				}
				return err
			})
		})
	}
}

// BenchmarkMemory measures the node-local fallbacks.
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("Claim/inflight=%d", n), func(b *testing.B) {
			s := newMemory(b, claims.WithMaxEntries(b.N+1))
			inFlight(b, n, func(i int) error {
				_, err := s.Claim(ctx, id("acme", "gh", strconv.Itoa(i)), "hook", 30*time.Second)
				return err
			})
		})
		b.Run(fmt.Sprintf("ReplayClaim/inflight=%d", n), func(b *testing.B) {
			r := testkit.Must(claims.NewMemoryReplay(claims.WithReplayCapacity(b.N + 1)))(b)
			until := time.Now().Add(time.Hour).Unix()
			inFlight(b, n, func(i int) error {
				_, err := r.Claim(ctx, "acme/stripe", strconv.Itoa(i), until)
				return err
			})
		})
	}
}
