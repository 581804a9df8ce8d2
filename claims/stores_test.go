package claims_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// t0 is a fixed start, not on a whole second, to catch truncation bugs.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 250_000_000, time.UTC)

func newFakeClock() *fakeClock { return &fakeClock{t: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var bucketSeq atomic.Int64

// bucketName gives every subtest its own bucket on a shared server.
func bucketName(stem string) string { return fmt.Sprintf("%s_%d", stem, bucketSeq.Add(1)) }

func noElapse(time.Duration) {}

func TestKVStore(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	runStoreSuite(t, func(t *testing.T) storeFixture {
		b := k.Bucket(t, kvstore.BucketConfig{Name: bucketName("claims")})
		return storeFixture{store: claims.NewKV(b), elapse: noElapse}
	})
}

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	runStoreSuite(t, func(t *testing.T) storeFixture {
		c := newFakeClock()
		return storeFixture{store: claims.NewMemory(claims.WithMemoryClock(c.Now)), elapse: c.Advance}
	})
}

func TestKVReplay(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	runReplaySuite(t, func(t *testing.T, capacity int) replayFixture {
		b := k.Bucket(t, claims.ReplayBucketConfig(bucketName("replay"), int64(capacity), 1))
		return replayFixture{store: claims.NewKVReplay(b, 0), now: time.Now, elapse: noElapse}
	})
}

func TestMemoryReplay(t *testing.T) {
	t.Parallel()
	runReplaySuite(t, func(t *testing.T, capacity int) replayFixture {
		c := newFakeClock()
		r := claims.NewMemoryReplay(capacity, 0, c.Now)
		elapse := func(d time.Duration) {
			c.Advance(d)
			if _, err := r.Sweep(c.Now().Unix()); err != nil {
				t.Fatal(err)
			}
		}
		return replayFixture{store: r, now: c.Now, elapse: elapse}
	})
}
