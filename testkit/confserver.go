package testkit

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ConfServer starts a standalone nats-server in process from conf, the text
// of a nats-server configuration file (as an operator would write it), and
// stops it in t.Cleanup. A configuration the server refuses fails the test
// with the server's reason and the text.
func ConfServer(t testing.TB, conf string) *server.Server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("testkit: nats-server refuses the configuration: %v\n%s", err, conf)
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("testkit: nats-server not ready")
	}
	return srv
}
