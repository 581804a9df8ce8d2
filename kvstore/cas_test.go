package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRoundTTL(t *testing.T) {
	cases := []struct{ in, want time.Duration }{
		{0, time.Second}, {-5, time.Second}, {time.Millisecond, time.Second}, {time.Second, time.Second},
		{1001 * time.Millisecond, 2 * time.Second}, {30 * time.Second, 30 * time.Second}, {72 * time.Hour, 72 * time.Hour},
	}
	for i, c := range cases {
		if got := kvstore.RoundTTL(c.in); got != c.want {
			t.Errorf("%d: RoundTTL(%v) = %v, want %v", i, c.in, got, c.want)
		}
	}
}

func TestBucketCreateUpdateTTL(t *testing.T) {
	t.Parallel()
	ctx, b := newBucket(t, kvstore.BucketConfig{Name: "cas"})

	rev, _, err := b.Create(ctx, "k1", []byte("v1"), 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	_, rec, err := b.Create(ctx, "k1", []byte("v2"), time.Second)
	if !errors.Is(err, kvstore.ErrExists) || rec == nil || string(rec.Value) != "v1" || rec.Revision != rev {
		t.Fatalf("second create: %v %+v", err, rec)
	}
	if rec.TTL != 2*time.Second {
		t.Fatalf("TTL rounded up: got %v", rec.TTL)
	}
	// A stale revision is a CAS conflict.
	if _, err := b.Update(ctx, "k1", []byte("x"), rev+100, time.Hour); !errors.Is(err, kvstore.ErrWrongLastSequence) {
		t.Fatalf("stale update: %v", err)
	}
	rev2, err := b.Update(ctx, "k1", []byte("v3"), rev, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Get(ctx, "k1")
	if err != nil || string(got.Value) != "v3" || got.Revision != rev2 || got.TTL != time.Hour {
		t.Fatalf("after update: %+v %v", got, err)
	}
	// Purge with a stale revision fails, with the right one succeeds.
	if err := b.Purge(ctx, "k1", rev); !errors.Is(err, kvstore.ErrWrongLastSequence) {
		t.Fatalf("stale purge: %v", err)
	}
	if err := b.Purge(ctx, "k1", rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "k1"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("get after purge: %v", err)
	}
	// Create over a purge marker works.
	if _, _, err := b.Create(ctx, "k1", []byte("v4"), time.Second); err != nil {
		t.Fatalf("create over marker: %v", err)
	}
}

func TestBucketKeyExpiresAndMarkerAllowsCreate(t *testing.T) {
	t.Parallel()
	ctx, b := newBucket(t, kvstore.BucketConfig{Name: "ttl"})
	if _, _, err := b.Create(ctx, "k", []byte("v"), time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testkit.Eventually(t, 5*time.Second, func() bool {
		_, err := b.Get(ctx, "k")
		return errors.Is(err, kvstore.ErrNotFound)
	}, "key expires")
	if time.Since(start) < 900*time.Millisecond {
		t.Fatalf("expired early after %v", time.Since(start))
	}
	// Right after expiry an expiry marker stands; Create must still succeed.
	if _, _, err := b.Create(ctx, "k", []byte("again"), time.Second); err != nil {
		t.Fatalf("create after expiry: %v", err)
	}
}

func TestBucketMaxMsgsFull(t *testing.T) {
	t.Parallel()
	k, ctx, b := kitBucket(t, kvstore.BucketConfig{Name: "cap", MaxMsgs: 1})
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := b.Create(ctx, fmt.Sprintf("k%d", i), []byte("v"), time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				counts["ok"]++
			case errors.Is(err, kvstore.ErrFull):
				counts["full"]++
			default:
				counts[err.Error()]++
			}
		}()
	}
	wg.Wait()
	if counts["ok"] != 1 || counts["full"] != 63 {
		t.Fatalf("counts = %v", counts)
	}
	// Re-opening with the same config is idempotent.
	if _, err := kvstore.OpenBucket(ctx, k.JS, kvstore.BucketConfig{Name: "cap", MaxMsgs: 1}); err != nil {
		t.Fatal(err)
	}
}

func TestMapErrorTimeout(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	b := k.Bucket(t, kvstore.BucketConfig{Name: "to"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := b.Create(ctx, "k", []byte("v"), time.Second)
	if !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	k.Server.Shutdown()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	_, err = b.Get(ctx2, "k")
	if !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("after shutdown: %v", err)
	}
	_ = jetstream.ErrKeyExists
}

func TestGetLeaderMatchesGet(t *testing.T) {
	t.Parallel()
	ctx, b := newBucket(t, kvstore.BucketConfig{Name: "leader"})
	if _, err := b.GetLeader(ctx, "k"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("absent: %v", err)
	}
	rev, _, err := b.Create(ctx, "k", []byte("v"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.GetLeader(ctx, "k")
	if err != nil || got.Revision != rev || string(got.Value) != "v" || got.TTL != 5*time.Second {
		t.Fatalf("leader get: %+v %v", got, err)
	}
	direct, _ := b.Get(ctx, "k")
	if !direct.Created.Equal(got.Created) {
		t.Fatalf("created differs: %v vs %v", direct.Created, got.Created)
	}
	if err := b.Purge(ctx, "k", rev); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetLeader(ctx, "k"); !errors.Is(err, kvstore.ErrNotFound) {
		t.Fatalf("after purge (marker): %v", err)
	}
}

func TestEnsureBucketUpdatesInPlace(t *testing.T) {
	t.Parallel()
	k, ctx, b := kitBucket(t, kvstore.BucketConfig{Name: "upd", MaxMsgs: 2})
	if _, _, err := b.Create(ctx, "a", []byte("1"), time.Minute); err != nil {
		t.Fatal(err)
	}
	// Re-open with a larger capacity: the stream is updated, data kept.
	b2, err := kvstore.OpenBucket(ctx, k.JS, kvstore.BucketConfig{Name: "upd", MaxMsgs: 5})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := k.JS.Stream(ctx, kvstore.StreamName("upd"))
	info, _ := st.Info(ctx)
	if info.Config.MaxMsgs != 5 || info.Config.MaxMsgsPerSubject != 1 || info.Config.Discard != jetstream.DiscardNew || info.State.Msgs != 1 {
		t.Fatalf("after re-open: %+v %+v", info.Config, info.State)
	}
	if _, err := b2.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
}

func TestBucketCreateStart(t *testing.T) {
	t.Parallel()
	ctx, b := newBucket(t, kvstore.BucketConfig{Name: "casasync"})

	// Many creates in flight at once, collected afterwards.
	var started []kvstore.AsyncCreate
	for i := range 50 {
		c, err := b.CreateStart(fmt.Sprintf("k%d", i), []byte("v"), 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		started = append(started, c)
	}
	for i, c := range started {
		rev, err := c.Wait(ctx)
		if err != nil || rev == 0 {
			t.Fatalf("create %d: %d %v", i, rev, err)
		}
		rec, err := b.Get(ctx, fmt.Sprintf("k%d", i))
		if err != nil || rec.Revision != rev || rec.TTL != 2*time.Second {
			t.Fatalf("create %d stored: %+v %v (rev %d)", i, rec, err, rev)
		}
	}
	// A taken key: refused as a CAS conflict, the holder untouched.
	c, err := b.CreateStart("k0", []byte("other"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx); !errors.Is(err, kvstore.ErrWrongLastSequence) {
		t.Fatalf("taken key: %v, want ErrWrongLastSequence", err)
	}
	if rec, err := b.Get(ctx, "k0"); err != nil || string(rec.Value) != "v" {
		t.Fatalf("holder: %+v %v", rec, err)
	}
	// No ack by the deadline: unavailable.
	c, err = b.CreateStart("late", []byte("v"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Wait(done); !errors.Is(err, protocol.ErrUnavailable) {
		// The ack may have won the race with the cancelled context.
		if err != nil {
			t.Fatalf("a done context: %v, want errUnavailable", err)
		}
	}
	if n := kvstore.PendingAcks(b); n != 0 {
		t.Fatalf("%d writes still await acks after every wait ended", n)
	}
}

// An acked write's reply subject serves the next writes: one after another,
// they all use the first one (and the server's subject cache keeps it).
func TestBucketWritesReuseAckedReplies(t *testing.T) {
	t.Parallel()
	ctx, b := newBucket(t, kvstore.BucketConfig{Name: "reuse"})
	for i := range 50 {
		if _, err := b.Put(ctx, fmt.Sprintf("k%d", i), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := kvstore.AckIDs(b); n != 1 {
		t.Fatalf("50 writes in a row used %d reply ids, want 1", n)
	}
	// Writes in flight together each need their own, and each gets its
	// own ack, rounds after round (ids freed by one round serve the next).
	for round := range 5 {
		var started []kvstore.AsyncCreate
		for i := range 10 {
			c, err := b.CreateStart(fmt.Sprintf("c%d-%d", round, i), []byte("v"), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			started = append(started, c)
		}
		for i, c := range started {
			rev, err := c.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rec, err := b.Get(ctx, fmt.Sprintf("c%d-%d", round, i)); err != nil || rec.Revision != rev {
				t.Fatalf("create c%d-%d acked revision %d, stored %+v %v", round, i, rev, rec, err)
			}
		}
	}
	if n := kvstore.AckIDs(b); n > 11 {
		t.Fatalf("rounds of 10 creates in flight used %d reply ids, want at most 11", n)
	}
}

// A write no stream takes (no responders: a leader being elected, here a
// deleted stream) is unavailable with ErrNoStream: the synchronous write
// after jetstream.PublishMsg's two retries, 250 ms apart; a started create
// at once, for its caller's full path to retry.
func TestBucketWriteNoStream(t *testing.T) {
	t.Parallel()
	k, ctx, b := kitBucket(t, kvstore.BucketConfig{Name: "gone"})
	if _, err := b.Put(ctx, "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if err := k.JS.DeleteStream(ctx, kvstore.StreamName("gone")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := b.Update(ctx, "k", []byte("v"), 0, time.Second)
	if !errors.Is(err, protocol.ErrUnavailable) || !errors.Is(err, kvstore.ErrNoStream) {
		t.Fatalf("update without a stream: %v", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Fatalf("update without a stream gave up after %v, before its retries", took)
	}
	c, err := b.CreateStart("k2", []byte("v"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx); !errors.Is(err, kvstore.ErrNoStream) {
		t.Fatalf("started create without a stream: %v", err)
	}
	if n := kvstore.PendingAcks(b); n != 0 {
		t.Fatalf("%d writes still await acks", n)
	}
}
