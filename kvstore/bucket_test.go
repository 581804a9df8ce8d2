package kvstore_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

// TestEnsureBucketCreatesWhatKVWouldMake: a bucket EnsureBucket creates
// (its stream made directly, to set what KeyValueConfig cannot) has the
// stream config of a bucket made by jetstream.CreateKeyValue and then
// brought to the same BucketConfig.
func TestEnsureBucketCreatesWhatKVWouldMake(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	for i, cfg := range []kvstore.BucketConfig{
		{Description: "plain"},
		{Description: "replay-like", MaxMsgs: 10, MaxValueSize: 64, NoMarkers: true},
		{Description: "markers 3s", LimitMarkerTTL: 3 * time.Second, Storage: jetstream.MemoryStorage},
	} {
		ref, fresh := cfg, cfg
		ref.Name, fresh.Name = "ref"+string(rune('a'+i)), "fresh"+string(rune('a'+i))
		marker := cfg.LimitMarkerTTL
		if marker == 0 {
			marker = time.Second
		}
		if _, err := k.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: ref.Name, Description: cfg.Description, History: 1, Storage: cfg.Storage,
			LimitMarkerTTL: marker, MaxValueSize: cfg.MaxValueSize,
		}); err != nil {
			t.Fatal(err)
		}
		k.Bucket(t, ref)   // updates the existing stream
		k.Bucket(t, fresh) // creates it
		got := streamConfig(t, k, fresh.Name)
		want := streamConfig(t, k, ref.Name)
		got.Name, got.Subjects = want.Name, want.Subjects
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n created %+v\n via KV  %+v", cfg.Description, got, want)
		}
	}
}

func streamConfig(t *testing.T, k *testkit.Kit, bucket string) jetstream.StreamConfig {
	t.Helper()
	st, err := k.JS.Stream(testkit.Context(t), kvstore.StreamName(bucket))
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().Config
}

// TestBucketAsyncPersist: AsyncPersist creates the stream in async persist
// mode; the bucket works; re-opening with the other mode is refused with
// ErrPersistMode (the server cannot change it), in both directions.
func TestBucketAsyncPersist(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	async := kvstore.BucketConfig{Name: "async", AsyncPersist: true}
	b := k.Bucket(t, async)
	if m := streamConfig(t, k, "async").PersistMode; m != jetstream.AsyncPersistMode {
		t.Fatalf("persist mode %v", m)
	}
	if _, _, err := b.Create(ctx, "k", []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	k.Bucket(t, async) // re-open, same mode
	for _, cfg := range []kvstore.BucketConfig{
		{Name: "async"},
		{Name: "sync"},
	} {
		if cfg.Name == "sync" {
			k.Bucket(t, cfg)
			cfg.AsyncPersist = true
		}
		_, err := kvstore.EnsureBucket(ctx, k.JS, cfg)
		if !errors.Is(err, kvstore.ErrPersistMode) {
			t.Fatalf("%s opened with async=%v: %v, want ErrPersistMode", cfg.Name, cfg.AsyncPersist, err)
		}
	}
}

// TestBucketConfigValidate: a negative count or duration is refused (not
// defaulted), zero keeps the default, and EnsureBucket refuses before it
// asks the server.
func TestBucketConfigValidate(t *testing.T) {
	t.Parallel()
	ok := kvstore.BucketConfig{Name: "b"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("zero fields: %v", err)
	}
	for name, c := range map[string]kvstore.BucketConfig{
		"no name":        {},
		"replicas":       {Name: "b", Replicas: -1},
		"marker TTL":     {Name: "b", LimitMarkerTTL: -time.Second},
		"max msgs":       {Name: "b", MaxMsgs: -1},
		"max value size": {Name: "b", MaxValueSize: -1},
	} {
		if err := c.Validate(); !errors.Is(err, kvstore.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
		if _, err := kvstore.EnsureBucket(t.Context(), nil, c); !errors.Is(err, kvstore.ErrInvalidConfig) {
			t.Errorf("EnsureBucket, %s: %v, want ErrInvalidConfig", name, err)
		}
	}
}
