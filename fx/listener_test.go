package fx

import (
	"net"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/testkit"
)

// TestLimitListener: at most n connections are accepted at once; closing
// one frees its slot; closing the listener ends a waiting Accept.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 2)
	accepted := make(chan net.Conn, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	got := []net.Conn{<-accepted, <-accepted}
	// Not a window standing for "not accepted": the accepting goroutine
	// is seen waiting for a slot (its stack), with the third connection
	// dialed, so it can only accept once a slot frees.
	deadline := time.After(5 * time.Second)
	for !testkit.Blocked("[select", "(*limitListener).Accept(") { // waiting for a slot
		select {
		case <-accepted:
			t.Fatal("third connection accepted over the limit of 2")
		case <-deadline:
			t.Fatal("after 5 s Accept neither took the third connection nor waited for a slot")
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case <-accepted:
		t.Fatal("third connection accepted over the limit of 2")
	default:
	}
	got[0].Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a freed slot was not reused")
	}
	got[1].Close()
	l.Close()
	<-done
}
