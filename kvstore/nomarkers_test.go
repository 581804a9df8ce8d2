package kvstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

// TestBucketNoMarkersFreesSlotAtExpiry: with NoMarkers an expired key
// leaves no marker, so its MaxMsgs slot frees at once, on R1 and R3 alike
// (with markers, an R3 stream at MaxMsgs refuses the expiry marker and the
// key never expires). Re-opening keeps the markers off.
func TestBucketNoMarkersFreesSlotAtExpiry(t *testing.T) {
	t.Parallel()
	cl := testkit.Cluster(t, 3)
	ctx := testkit.Context(t)
	for _, replicas := range []int{1, 3} {
		cfg := kvstore.BucketConfig{Name: "nomark" + string(rune('0'+replicas)), Replicas: replicas, MaxMsgs: 1, NoMarkers: true}
		cl.Bucket(t, 0, cfg)
		b := cl.Bucket(t, 1, cfg) // idempotent re-open from another node
		st, err := cl.JetStream(t, 0).Stream(ctx, kvstore.StreamName(cfg.Name))
		if err != nil {
			t.Fatal(err)
		}
		if c := st.CachedInfo().Config; c.SubjectDeleteMarkerTTL != 0 || !c.AllowMsgTTL || c.MaxMsgs != 1 {
			t.Fatalf("R%d: marker TTL %v, msg TTL %v, max msgs %d", replicas, c.SubjectDeleteMarkerTTL, c.AllowMsgTTL, c.MaxMsgs)
		}
		if _, _, err := b.Create(ctx, "one", []byte("v"), time.Second); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Create(ctx, "two", []byte("v"), time.Minute); !errors.Is(err, kvstore.ErrFull) {
			t.Fatalf("R%d: second key at capacity 1: %v", replicas, err)
		}
		testkit.Eventually(t, 5*time.Second, func() bool {
			_, _, err := b.Create(ctx, "two", []byte("v"), time.Minute)
			return err == nil
		}, "the expired key frees its slot")
	}
}
