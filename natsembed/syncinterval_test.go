package natsembed_test

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/natsembed"
)

// SyncInterval is the server's JetStream sync interval; unset, it is
// nats-server's default (2 minutes).
func TestSyncInterval(t *testing.T) {
	for _, c := range []struct{ set, want time.Duration }{{0, 2 * time.Minute}, {750 * time.Millisecond, 750 * time.Millisecond}} {
		srv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir(), Listen: "off", SyncInterval: c.set})
		if err != nil {
			t.Fatal(err)
		}
		got := srv.NATS().JetStreamConfig().SyncInterval
		srv.Shutdown()
		if got != c.want {
			t.Errorf("SyncInterval %v: the server syncs every %v, want %v", c.set, got, c.want)
		}
	}
}
