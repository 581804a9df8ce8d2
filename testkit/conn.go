package testkit

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Connect opens another in-process connection to the kit's server (as
// another node would), closed by t.Cleanup. Like ClusterKit.Connect.
func (k *Kit) Connect(t T, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := k.Server.Connect(opts...)
	if err != nil {
		t.Fatalf("testkit: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Dial connects to the NATS server at url (a real process's, as the fault
// tests start), failing the test on an error; closed by t.Cleanup.
func Dial(t T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("testkit: connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream is the JetStream context of nc (e.g. a connection from
// Connect), failing the test on an error.
func JetStream(t T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("testkit: jetstream: %v", err)
	}
	return js
}
