// Package testkit gives a test an embedded nats-server with JetStream, a
// connection to it and sluice's buckets, all torn down when the test ends.
// It is meant for sluice's own tests and for users testing code that talks
// to sluice.
package testkit

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/internal/jstest"
	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
)

// T is the part of testing.TB the kit uses. *testing.T and *testing.B
// satisfy it; so can a small type of your own outside a test (see the
// package example).
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Kit is a running embedded server and a connection to it.
type Kit struct {
	Server *natsembed.Server
	Conn   *nats.Conn
	JS     jetstream.JetStream
	// Dir is the server's JetStream store directory.
	Dir string
}

// protocol.ErrInvalidOption is wrapped by the error New fails the test with for an
// option with a bad argument.
var errInvalidOption = fmt.Errorf("testkit: %w", protocol.ErrInvalidOption)

// Option configures New: the server a Kit starts.
type Option interface {
	applyKit(*natsembed.ServerConfig) error
}

type kitOption func(*natsembed.ServerConfig) error

func (o kitOption) applyKit(c *natsembed.ServerConfig) error { return o(c) }

// WithListener gives the server a random loopback TCP port (the default is
// in-process only). Kit.Server.ClientURL() then returns its URL.
func WithListener() Option {
	return kitOption(func(c *natsembed.ServerConfig) error { c.Listen = "127.0.0.1:-1"; return nil })
}

// WithStoreDir keeps JetStream files in dir (e.g. to restart on the same
// data; absent: a temporary directory; empty is an invalid option).
func WithStoreDir(dir string) Option {
	return kitOption(option.Required(errInvalidOption, dir != "", "empty store dir", func(c *natsembed.ServerConfig) { c.StoreDir = dir }))
}

// WithUsers makes the server's clients sign in as one of users (absent:
// no authentication; none given is an invalid option).
func WithUsers(users ...natsembed.User) Option {
	return kitOption(option.Required(errInvalidOption, len(users) > 0, "no users", func(c *natsembed.ServerConfig) { c.Users = users }))
}

// New starts an in-process nats-server with JetStream in a temporary
// directory and connects to it. Both are stopped by t.Cleanup. An invalid
// option fails the test with an error wrapping protocol.ErrInvalidOption.
func New(t T, opts ...Option) *Kit {
	t.Helper()
	cfg := natsembed.ServerConfig{StoreDir: t.TempDir()}
	if err := option.Apply(&cfg, opts, Option.applyKit); err != nil {
		t.Fatalf("%v", err)
	}
	srv, nc, js := jstest.Start(t, func() (*natsembed.Server, error) { return natsembed.StartServer(cfg) })
	return &Kit{Server: srv, Conn: nc, JS: js, Dir: cfg.StoreDir}
}

// Context is a context that ends with the test (or after 30 s).
func Context(t T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Bucket opens (creates) a KV bucket on the kit's server.
func (k *Kit) Bucket(t T, cfg kvstore.BucketConfig) *kvstore.Bucket {
	t.Helper()
	b, err := kvstore.OpenBucket(Context(t), k.JS, cfg)
	if err != nil {
		t.Fatalf("testkit: bucket %s: %v", cfg.Name, err)
	}
	return b
}

// ClaimsKV is claims.NewKV(b), failing the test on an error.
func ClaimsKV(t T, b *kvstore.Bucket) *claims.KV {
	t.Helper()
	s, err := claims.NewKV(b)
	if err != nil {
		t.Fatalf("testkit: claims store: %v", err)
	}
	return s
}

// Eventually polls cond every 10 ms until it returns true or timeout passes,
// then fails the test with msg. Never sleep to wait for something.
func Eventually(t T, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
