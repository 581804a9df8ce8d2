package durability_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
)

// startServer starts an embedded server in dataDir's jetstream directory,
// as fx does, and connects to it.
func startServer(t *testing.T, dataDir string) (*natsembed.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: filepath.Join(dataDir, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return srv, nc, js
}

// config is a single node's configuration over dataDir, as fx fills it
// from the default flags.
func config(dataDir string) durability.Config {
	return durability.Config{Level: "synced", DataDir: dataDir, Prefix: "sluice", HooksStream: "HOOKS", OutboxStream: "HOOKS_OUTBOX", Shards: 1}
}

// TestStartSingleNode: Start gives each single-node mode its row of the
// table (a barrier at NodeRounds only, the server's group sync in
// every one), registers the store sync's counters, and refuses a data
// dir whose record says it held more than its store does.
func TestStartSingleNode(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, level := range []struct {
		name               string
		acked, serverFsync bool
	}{{"synced", false, false}, {"acked", true, false}, {"sync-always", false, true}} {
		t.Run(level.name, func(t *testing.T) {
			dir := t.TempDir()
			srv, nc, js := startServer(t, dir)
			reg := prometheus.NewRegistry()
			cfg := config(dir)
			cfg.Acked, cfg.ServerFsync, cfg.Level = level.acked, level.serverFsync, level.name
			cfg.Server, cfg.Conn, cfg.JS, cfg.Registerer, cfg.Logger = srv, nc, js, reg, log
			m := cfg.Mode()
			node, err := durability.Start(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer node.Stop()
			if (node.Barrier != nil) != (m == durability.NodeRounds) {
				t.Errorf("mode %v: barrier %v", m, node.Barrier)
			}
			if node.Group == nil {
				t.Errorf("mode %v: no group sync", m)
			}
			if node.Barrier != nil && node.Barrier != node.Group {
				t.Errorf("mode %v: the barrier is not the server's group sync", m)
			}
			// As a hub, the node answers its leaves at its level, after a
			// round of its group sync unless nats-server fsyncs each write.
			hub, err := node.ServeHub()
			if err != nil {
				t.Fatal(err)
			}
			defer hub.Stop()
			waits := node.Group.Stats().Waits
			msg, err := nc.Request(protocol.HubSyncSubject(cfg.Prefix), nil, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var rep protocol.SyncReply
			if err := json.Unmarshal(msg.Data, &rep); err != nil || !rep.OK || rep.Durability != level.name {
				t.Errorf("mode %v: the hub answered %s (%v), want ok at %s", m, msg.Data, err, level.name)
			}
			if joined := node.Group.Stats().Waits > waits; joined == level.serverFsync {
				t.Errorf("mode %v: the hub's answer joined a round of the group sync: %v", m, joined)
			}
			// The group sync's rounds are a histogram of their lengths:
			// its count is the rounds run, its buckets hold them all.
			if err := node.Group.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			var rounds *dto.Histogram
			for _, f := range families {
				names = append(names, f.GetName())
				if f.GetName() == "sluice_store_sync_round_seconds" && f.GetType() == dto.MetricType_HISTOGRAM {
					rounds = f.GetMetric()[0].GetHistogram()
				}
			}
			if rounds == nil {
				t.Fatalf("no histogram sluice_store_sync_round_seconds among %v", names)
			}
			bs := rounds.GetBucket()
			if want := node.Group.Stats().Rounds; rounds.GetSampleCount() != want || want == 0 {
				t.Errorf("round histogram count %d, the group sync ran %d rounds", rounds.GetSampleCount(), want)
			}
			if len(bs) != len(durability.SyncRoundBounds()) || bs[len(bs)-1].GetCumulativeCount() > rounds.GetSampleCount() || rounds.GetSampleSum() <= 0 {
				t.Errorf("round histogram: buckets %v, count %d, sum %v", bs, rounds.GetSampleCount(), rounds.GetSampleSum())
			}
		})
	}
	t.Run("refuses a store emptier than its record", func(t *testing.T) {
		dir := t.TempDir()
		if err := durability.WriteRecord(filepath.Join(dir, durability.RecordFile), durability.Record{Streams: map[string]uint64{"HOOKS": 10}}); err != nil {
			t.Fatal(err)
		}
		srv, _, js := startServer(t, dir)
		cfg := config(dir)
		cfg.Server, cfg.JS, cfg.Logger = srv, js, log
		node, err := durability.Start(context.Background(), cfg)
		if err == nil {
			node.Stop()
			t.Fatal("started over a store that lost the recorded HOOKS")
		}
		if !strings.Contains(err.Error(), "HOOKS") {
			t.Errorf("the refusal does not name the stream: %v", err)
		}
	})
}
