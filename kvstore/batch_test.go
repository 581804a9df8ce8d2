package kvstore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

// TestBatchConflictInTheMiddle: on an R3 bucket, writes queued behind the
// units in flight leave as one atomic batch. A batch holding a create of
// a key that exists and an update naming a revision the key moved on
// from is refused whole by the stream (nats-server commits an atomic
// batch all or nothing); each of its writes is then sent again alone and
// gets its own answer: the others are stored at the revisions their acks
// name, the two conflicts are refused as such, and the batch is sent once.
func TestBatchConflictInTheMiddle(t *testing.T) {
	t.Parallel()
	cl := testkit.Cluster(t, 3)
	ctx := testkit.Context(t)
	b := reopened(t, cl, kvstore.BucketConfig{Name: "batched", Replicas: 3})
	if _, _, err := b.Create(ctx, "taken", []byte("first"), time.Minute); err != nil {
		t.Fatal(err)
	}
	moved, _, err := b.Create(ctx, "moved", []byte("v1"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Update(ctx, "moved", []byte("v2"), moved, time.Minute); err != nil {
		t.Fatal(err)
	}
	release, ok := kvstore.HoldBatches(b)
	if !ok {
		t.Fatal("an R3 bucket's writes do not travel in batches")
	}
	type write struct {
		key      string
		c        kvstore.AsyncCreate
		conflict bool
	}
	var writes []write
	add := func(key string, conflict bool, start func() (kvstore.AsyncCreate, error)) {
		c, err := start()
		if err != nil {
			t.Fatal(err)
		}
		writes = append(writes, write{key, c, conflict})
	}
	for i := range 6 {
		key := fmt.Sprintf("k%d", i)
		add(key, false, func() (kvstore.AsyncCreate, error) { return b.CreateStart(key, []byte(key), time.Minute) })
		switch i {
		case 2:
			add("taken", true, func() (kvstore.AsyncCreate, error) { return b.CreateStart("taken", []byte("second"), time.Minute) })
		case 4:
			add("moved", true, func() (kvstore.AsyncCreate, error) { return b.UpdateStart("moved", []byte("v3"), moved, time.Minute) })
		}
	}
	if got := kvstore.Queued(b); got != len(writes) {
		t.Fatalf("%d writes queued, want %d", got, len(writes))
	}
	before := kvstore.Batches(b)
	release()
	for _, w := range writes {
		rev, err := w.c.Wait(ctx)
		if w.conflict {
			if !errors.Is(err, kvstore.ErrWrongLastSequence) {
				t.Fatalf("%s: conflicting write answered %d, %v; want ErrWrongLastSequence", w.key, rev, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", w.key, err)
		}
		rec, err := b.GetLeader(ctx, w.key)
		if err != nil || rec.Revision != rev || string(rec.Value) != w.key {
			t.Fatalf("%s: acked at revision %d, the key holds %+v (%v)", w.key, rev, rec, err)
		}
	}
	if got := kvstore.Batches(b) - before; got != 1 {
		t.Fatalf("the queue left in %d batches, want 1", got)
	}
	for key, want := range map[string]string{"taken": "first", "moved": "v2"} {
		if rec, err := b.GetLeader(ctx, key); err != nil || string(rec.Value) != want {
			t.Fatalf("%s holds %+v, %v; want %q", key, rec, err, want)
		}
	}
}

// TestBatchedWritesEachGetTheirRevision: many concurrent creates and
// updates on an R3 bucket, some of them in batches, each acked at the
// revision its key holds.
func TestBatchedWritesEachGetTheirRevision(t *testing.T) {
	t.Parallel()
	cl := testkit.Cluster(t, 3)
	ctx := testkit.Context(t)
	b := reopened(t, cl, kvstore.BucketConfig{Name: "many", Replicas: 3})
	const n = 400
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", i)
			rev, _, err := b.Create(ctx, key, []byte("pending"), time.Minute)
			if err != nil {
				errs <- fmt.Errorf("%s create: %w", key, err)
				return
			}
			if rev, err = b.Update(ctx, key, []byte(key), rev, time.Hour); err != nil {
				errs <- fmt.Errorf("%s update: %w", key, err)
				return
			}
			rec, err := b.GetLeader(ctx, key)
			if err != nil || rec.Revision != rev || string(rec.Value) != key {
				errs <- fmt.Errorf("%s: acked at revision %d, the key holds %+v (%v)", key, rev, rec, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if kvstore.Batches(b) == 0 {
		t.Error("no write travelled in a batch")
	}
}
