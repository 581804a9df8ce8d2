package kvstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/jstest"
	"github.com/sluice-dev/sluice/natsembed"
)

// serverConn is a connection to an embedded server of the test's own, and
// its JetStream context (testkit imports this package: internal tests
// cannot use it).
func serverConn(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	_, nc, js := jstest.Start(t, func() (*natsembed.Server, error) {
		return natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir()})
	})
	return nc, js
}

// noDirect is a stream whose direct gets find no responders, as a replicated
// stream's do for a moment after its creation or a restart.
type noDirect struct{ jetstream.Stream }

func (noDirect) GetLastMsgForSubject(context.Context, string) (*jetstream.RawStreamMsg, error) {
	return nil, nats.ErrNoResponders
}

// TestGetWithoutDirectResponders: a read whose direct get finds no
// responders is answered by the stream leader (a clean-clone CI run once saw
// "no responders" from Get on an R3 bucket created a moment before).
func TestGetWithoutDirectResponders(t *testing.T) {
	_, js := serverConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := OpenBucket(ctx, js, BucketConfig{Name: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	rev, _, err := b.Create(ctx, "k", []byte("v"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b.stream = noDirect{b.stream}
	rec, err := b.Get(ctx, "k")
	if err != nil || rec.Revision != rev || string(rec.Value) != "v" || rec.TTL != time.Minute {
		t.Fatalf("Get without direct responders: %+v, %v; want revision %d, value v, TTL 1m", rec, err, rev)
	}
	if _, err := b.Get(ctx, "absent"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an absent key without direct responders: %v, want ErrNotFound", err)
	}
}
