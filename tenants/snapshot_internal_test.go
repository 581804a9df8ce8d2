package tenants

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/testkit"
)

// TestSnapshotIsAtomic: while a tenant's record is rewritten again and
// again, a reader of one snapshot never sees half a record: its two
// sources always carry the body limit of the same write.
func TestSnapshotIsAtomic(t *testing.T) {
	k := testkit.New(t)
	b := k.Bucket(t, BucketConfig("sluice", 1))
	r := NewRegistry(b)
	if err := r.Start(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	stop, done := make(chan struct{}), make(chan map[int64]bool)
	var versions atomic.Int64 // distinct versions the reader saw so far
	go func() {
		seen := map[int64]bool{}
		defer func() { done <- seen }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			rt := r.lookup("acme") // one snapshot
			if rt == nil {
				continue
			}
			x, y := rt.sources["x"], rt.sources["y"]
			if x == nil || y == nil || x.maxBody != y.maxBody || rt.rec.Sources["x"].MaxBodyBytes != x.maxBody {
				t.Errorf("half-applied record: %+v %+v", x, y)
				return
			}
			if !seen[x.maxBody] {
				seen[x.maxBody] = true
				versions.Add(1)
			}
		}
	}()
	ctx := testkit.Context(t)
	var rev uint64
	// At least 50 writes, and on until the reader saw two versions (on a
	// busy machine it may not run at all during the first 50).
	deadline := time.Now().Add(10 * time.Second)
	last := int64(0)
	for i := int64(1); i <= 50 || (versions.Load() < 2 && time.Now().Before(deadline)); i++ {
		last = 1000 + i
		rec := fmt.Sprintf(`{"name":"acme","sources":{"x":{"max_body_bytes":%d},"y":{"max_body_bytes":%d}},"updated_at":"2026-01-01T00:00:00Z"}`, 1000+i, 1000+i)
		var err error
		if rev, err = b.Put(ctx, "acme", []byte(rec), 0); err != nil {
			t.Fatal(err)
		}
		r.waitApplied(ctx, rev)
	}
	close(stop)
	if seen := <-done; len(seen) < 2 || r.lookup("acme").sources["x"].maxBody != last {
		t.Fatalf("reader saw %d versions; last %d", len(seen), r.lookup("acme").sources["x"].maxBody)
	}
}
