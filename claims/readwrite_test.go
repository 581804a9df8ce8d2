package claims_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// writeGate is the seam of TestKVChangedBetweenReadAndWrite: an in-process
// connection to the real server whose client, once armed, is held at its
// first publish to one subject (the key's write: PUB or HPUB) until
// released. Everything it sent before, the read included, has gone through.
type writeGate struct {
	srv     nats.InProcessConnProvider
	mu      sync.Mutex
	match   []byte        // "PUB <subject> ", or nil when not armed
	held    chan struct{} // closed when the write is held
	release chan struct{} // closed to let it go
}

func (g *writeGate) InProcessConn() (net.Conn, error) {
	c, err := g.srv.InProcessConn()
	if err != nil {
		return nil, err
	}
	return gatedConn{Conn: c, g: g}, nil
}

// arm holds the next write to subject.
func (g *writeGate) arm(subject string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.match = []byte("PUB " + subject + " ") // HPUB too
	g.held, g.release = make(chan struct{}), make(chan struct{})
}

type gatedConn struct {
	net.Conn
	g *writeGate
}

func (c gatedConn) Write(p []byte) (int, error) {
	g := c.g
	g.mu.Lock()
	hit := g.match != nil && bytes.Contains(p, g.match)
	if hit {
		g.match = nil
	}
	held, release := g.held, g.release
	g.mu.Unlock()
	if hit {
		close(held)
		<-release
	}
	return c.Conn.Write(p)
}

// TestKVChangedBetweenReadAndWrite changes a claim between Settle's (and
// Release's) read of it and its write: the claim h1 holds is released and
// h2 claims the key in that gap, through another connection. The write
// must be refused (protocol.ErrClaimLost) and h2's claim stay as it is — a
// write made as a plain put or purge after a read that found the claim
// h1's would commit or drop h2's claim.
func TestKVChangedBetweenReadAndWrite(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	cfg := kvstore.BucketConfig{Name: bucketName("claims_rw")}
	other := newKV(t, k.Bucket(t, cfg)) // the kit's connection
	gate := &writeGate{srv: k.Server.NATS()}
	nc := k.Connect(t, nats.InProcessServer(gate))
	gb, err := kvstore.OpenBucket(ctx, testkit.JetStream(t, nc), cfg)
	if err != nil {
		t.Fatal(err)
	}
	gated := newKV(t, gb)

	for _, op := range []struct {
		name string
		call func(ctx context.Context, cid claims.ID, rev uint64) error
	}{
		{"Settle", func(ctx context.Context, cid claims.ID, rev uint64) error {
			return gated.Settle(ctx, cid, "h1", rev, hour)
		}},
		{"Release", func(ctx context.Context, cid claims.ID, rev uint64) error {
			return gated.Release(ctx, cid, "h1", rev)
		}},
	} {
		t.Run(op.name, func(t *testing.T) {
			cid := id("acme", "gh", "between-"+op.name)
			r1 := claimAs(t, gated, cid, "h1", time.Minute, claims.OK, "h1")
			gate.arm(gb.Subject(claims.KVKey(cid)))
			done := make(chan error, 1)
			go func() { done <- op.call(ctx, cid, r1.Revision) }()
			select {
			case <-gate.held: // read done, write held
			case err := <-done:
				t.Fatalf("%s returned before its write: %v", op.name, err)
			case <-ctx.Done():
				t.Fatal("no write")
			}
			if err := other.Release(ctx, cid, "h1", r1.Revision); err != nil {
				t.Fatal(err)
			}
			r2 := claimAs(t, other, cid, "h2", time.Minute, claims.OK, "h2")
			close(gate.release)
			if err := <-done; !errors.Is(err, protocol.ErrClaimLost) {
				t.Fatalf("%s after the claim changed under it: %v, want ErrClaimLost", op.name, err)
			}
			wantState(t, get(t, other, cid), protocol.StatePending, "h2", r2.Revision)
		})
	}
}
