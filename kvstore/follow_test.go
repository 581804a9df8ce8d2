package kvstore_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

// TestFollow: the initial values, then loaded, then every change in order,
// from one goroutine that Stop ends.
func TestFollow(t *testing.T) {
	k := testkit.New(t)
	b := k.Bucket(t, kvstore.BucketConfig{Name: "follow"})
	ctx := testkit.Context(t)
	for _, key := range []string{"a", "b"} {
		if _, err := b.Put(ctx, key, []byte("v-"+key), 0); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var seen []string
	add := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, s)
	}
	got := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(seen, " ")
	}
	f, err := kvstore.Follow(ctx, b.KV(), func(e jetstream.KeyValueEntry, initial bool) {
		op := "put"
		if e.Operation() != jetstream.KeyValuePut {
			op = "del"
		}
		add(op + ":" + e.Key() + map[bool]string{true: ":initial", false: ""}[initial])
	}, func() { add("loaded") })
	if err != nil {
		t.Fatal(err)
	}
	if s := got(); s != "put:a:initial put:b:initial loaded" {
		t.Fatalf("at start: %q", s)
	}
	if _, err := b.Put(ctx, "c", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Purge(ctx, "a", 0); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return got() == "put:a:initial put:b:initial loaded put:c del:a" }, "changes followed: "+got())
	f.Stop()
	f.Stop()
}
