package kvstore

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestStaleAckOnReusedIDDropped: a stream leader replaced before its
// followers learned a commit answers that write again from the new leader.
// When the second answer reaches a later write that reused the id, it must
// not be taken for that write's ack (a refused claim create reported as
// taken would make two winners for a key). Here the test plays the stream:
// it acks the first write at sequence 10, then answers the second write,
// on the same reply subject, first with that stale ack and only then with
// its own (11).
func TestStaleAckOnReusedIDDropped(t *testing.T) {
	nc, _ := serverConn(t)
	writes := make(chan *nats.Msg, 4)
	if _, err := nc.ChanSubscribe("stream.>", writes); err != nil {
		t.Fatal(err)
	}
	a := newAcker(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		seq uint64
		err error
	}
	write := func(subject string) <-chan result {
		out := make(chan result, 1)
		go func() {
			seq, err := a.write(ctx, subject, nil, []byte("v"))
			out <- result{seq, err}
		}()
		return out
	}
	ack := func(reply string, seq uint64) {
		t.Helper()
		if err := nc.Publish(reply, serverAck("S", "", seq, false, nil, true)); err != nil {
			t.Fatal(err)
		}
	}
	next := func() *nats.Msg {
		t.Helper()
		select {
		case m := <-writes:
			return m
		case <-ctx.Done():
			t.Fatal("no write reached the stream")
			return nil
		}
	}

	first := write("stream.a")
	m1 := next()
	ack(m1.Reply, 10)
	if r := <-first; r.err != nil || r.seq != 10 {
		t.Fatalf("first write: %d %v", r.seq, r.err)
	}
	second := write("stream.b")
	m2 := next()
	if m2.Reply != m1.Reply {
		t.Fatalf("the second write did not reuse the first's reply subject (%s, %s)", m1.Reply, m2.Reply)
	}
	ack(m2.Reply, 10) // the first write answered again: stale
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		stale := a.stale
		a.mu.Unlock()
		if stale == 1 {
			break
		}
		select {
		case r := <-second:
			t.Fatalf("the second write took the first's stale ack: %d %v", r.seq, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the stale ack was not counted")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case r := <-second:
		t.Fatalf("the second write resolved on a stale ack: %d %v", r.seq, r.err)
	default:
	}
	ack(m2.Reply, 11)
	if r := <-second; r.err != nil || r.seq != 11 {
		t.Fatalf("second write: %d %v, want 11", r.seq, r.err)
	}
	// The id's high-water mark moved on: 11 is stale for the next write.
	third := write("stream.c")
	m3 := next()
	ack(m3.Reply, 11)
	ack(m3.Reply, 12)
	if r := <-third; r.err != nil || r.seq != 12 {
		t.Fatalf("third write: %d %v, want 12", r.seq, r.err)
	}
}
