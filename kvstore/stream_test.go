package kvstore_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

// TestEnsureStreamWritesNothingWhenUnchanged: ensuring a stream that
// already has its configuration leaves its meta.inf as it was (an update
// rewrites it, and a power cut before the next sync can empty it: the
// stream is then gone at the next start); a configuration that asks for
// something new is applied.
func TestEnsureStreamWritesNothingWhenUnchanged(t *testing.T) {
	k := testkit.New(t)
	ctx := testkit.Context(t)
	sc := jetstream.StreamConfig{
		Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage, MaxAge: time.Hour,
		MaxBytes: -1, Discard: jetstream.DiscardNew, Duplicates: 2 * time.Minute, AllowAtomicPublish: true,
	}
	if _, err := kvstore.EnsureStream(ctx, k.JS, sc); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(k.Dir, "jetstream", "$G", "streams", "S", "meta.inf")
	before, err := os.Stat(meta)
	if err != nil {
		t.Fatal(err)
	}
	// The file system's clock may not tick between two writes: make the
	// first one's time unmistakable.
	old := before.ModTime().Add(-time.Hour)
	if err := os.Chtimes(meta, old, old); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := kvstore.EnsureStream(ctx, k.JS, sc); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(meta); err != nil || !fi.ModTime().Equal(old) {
		t.Fatalf("an unchanged configuration rewrote meta.inf (%v, %v)", fi.ModTime(), err)
	}
	sc.MaxAge = 2 * time.Hour
	st, err := kvstore.EnsureStream(ctx, k.JS, sc)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != 2*time.Hour {
		t.Fatalf("max age %v after ensuring 2h", got)
	}
	if fi, err := os.Stat(meta); err != nil || fi.ModTime().Equal(old) {
		t.Fatalf("a changed configuration left meta.inf as it was (%v)", err)
	}
	// Back to unlimited age: a zero that an omitted field cannot say.
	sc.MaxAge = 0
	if st, err = kvstore.EnsureStream(ctx, k.JS, sc); err != nil || st.CachedInfo().Config.MaxAge != 0 {
		t.Fatalf("max age 0 not applied: %v", err)
	}
}

// TestCovers: the server's form of a configuration covers it (its
// defaults filled in); any stated difference does not.
func TestCovers(t *testing.T) {
	want := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage, Replicas: 1}
	have := want
	have.MaxMsgs, have.MaxBytes, have.MaxMsgsPerSubject, have.MaxConsumers, have.MaxMsgSize = -1, -1, -1, -1, -1
	have.Duplicates = 2 * time.Minute
	if !kvstore.Covers(have, want) {
		t.Fatal("the server's defaults made a difference")
	}
	for name, change := range map[string]func(*jetstream.StreamConfig){
		"subjects": func(c *jetstream.StreamConfig) { c.Subjects = []string{"t.>"} },
		"replicas": func(c *jetstream.StreamConfig) { c.Replicas = 3 },
		"limit":    func(c *jetstream.StreamConfig) { c.MaxBytes = 100 },
		"flag":     func(c *jetstream.StreamConfig) { c.AllowAtomicPublish = true },
		"transform": func(c *jetstream.StreamConfig) {
			c.SubjectTransform = &jetstream.SubjectTransformConfig{Source: "s.>", Destination: "u.>"}
		},
	} {
		w := want
		change(&w)
		if kvstore.Covers(have, w) {
			t.Errorf("%s: a changed setting is covered", name)
		}
	}
}
