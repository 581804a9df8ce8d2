package kvstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

// TestBucketWriteRightBehindWriteToSameKey: on an R3 bucket, a
// revision-checked write that reaches the leader while the previous write
// to its key is proposed but not yet applied there is refused undecided
// (10164). The leader acks a write a moment before it stops counting it in
// flight, so a settle sent right after its claim's ack met that refusal
// and was taken for a conflict (a clean-clone CI run: 1 of 1,920 settles
// right after their claim failed). Here each update and purge is sent
// right behind the create it names, on the same connection, so it always
// reaches the leader while that create is in flight: it must wait for the
// create and succeed. A real conflict stays one.
func TestBucketWriteRightBehindWriteToSameKey(t *testing.T) {
	t.Parallel()
	cl := testkit.Cluster(t, 3)
	ctx := testkit.Context(t)
	b := reopened(t, cl, kvstore.BucketConfig{Name: "behind", Replicas: 3}) // not necessarily the leader's node
	var last uint64                                                         // the stream's last sequence: this test is its only writer
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		c, err := b.CreateStart(key, []byte("pending"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		created := last + 1
		var werr error
		var rev uint64
		switch i % 3 {
		case 0, 1: // the settle of a claim
			rev, werr = b.Update(ctx, key, []byte("committed"), created, time.Hour)
		case 2: // its release
			werr = b.Purge(ctx, key, created)
		}
		if got, err := c.Wait(ctx); err != nil || got != created {
			t.Fatalf("%s: create acked %d, %v; want revision %d", key, got, err, created)
		}
		if werr != nil {
			t.Fatalf("%s: write right behind its create (revision %d): %v", key, created, werr)
		}
		last = created + 1
		if rev != 0 && rev != last {
			t.Fatalf("%s: update acked revision %d, want %d", key, rev, last)
		}
	}
	// A real conflict sent right behind a create is still refused as one.
	c, err := b.CreateStart("conflict", []byte("pending"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Update(ctx, "conflict", []byte("committed"), last+2, time.Hour); !errors.Is(err, kvstore.ErrWrongLastSequence) {
		t.Fatalf("update naming a revision the key never had: %v, want ErrWrongLastSequence", err)
	}
	if got, err := c.Wait(ctx); err != nil || got != last+1 {
		t.Fatalf("conflict: create acked %d, %v; want %d", got, err, last+1)
	}
	if rec, err := b.GetLeader(ctx, "conflict"); err != nil || string(rec.Value) != "pending" {
		t.Fatalf("conflict: key holds %+v, %v; want the create's value", rec, err)
	}
}

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
		b := reopened(t, cl, cfg)
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
