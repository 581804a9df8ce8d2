// Package jstest starts a test's JetStream server and connects to it, and
// holds a log sink (LogBuffer), the same way for testkit and for the tests
// testkit cannot serve: natsembed's and kvstore's own internal tests
// (testkit imports both packages, so they cannot import it). It imports no sluice package, only nats.go: the server
// is whatever the caller starts (a natsembed.Server).
package jstest

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// T is the part of testing.TB Start uses (testkit.T satisfies it).
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Server is a started server a test connects to in process
// (*natsembed.Server is one).
type Server interface {
	Connect(opts ...nats.Option) (*nats.Conn, error)
	Shutdown()
}

// Start starts a server with start, connects to it in process and opens
// the connection's JetStream context. The server is shut down and the
// connection closed when the test ends; any error fails the test.
func Start[S Server](t T, start func() (S, error)) (S, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := start()
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return srv, nc, js
}
