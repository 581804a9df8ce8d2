package natsembed

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// syncLog records what a round synced (the real fsync still runs).
type syncLog struct {
	mu    sync.Mutex
	paths []string
	fail  error
}

func (l *syncLog) fsync(f *os.File, data bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paths = append(l.paths, f.Name())
	if l.fail != nil {
		return l.fail
	}
	return fsyncFile(f, data)
}

func (l *syncLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.paths
	l.paths = nil
	return out
}

func startSyncServer(t *testing.T) (*Server, jetstream.JetStream, *syncLog) {
	t.Helper()
	srv, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
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
	l := &syncLog{}
	srv.store.fsync = l.fsync
	return srv, js, l
}

func hasSuffix(paths []string, suffix string) bool {
	return slices.ContainsFunc(paths, func(p string) bool { return strings.HasSuffix(p, suffix) })
}

// A round syncs what a restart needs of a new stream (its meta files, its
// directories, its block), then only the block that an ack wrote to, and
// nothing when nothing was written.
func TestStoreSyncRound(t *testing.T) {
	srv, js, l := startSyncServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.SyncStore(); err != nil {
		t.Fatal(err)
	}
	l.take()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := srv.SyncStore(); err != nil {
		t.Fatal(err)
	}
	got := l.take()
	for _, want := range []string{"/streams/S/meta.inf", "/streams/S/meta.sum", "/streams/S", "/streams", "/streams/S/msgs", "/streams/S/msgs/1.blk"} {
		if !hasSuffix(got, want) {
			t.Errorf("first round after a new stream synced %v: no %s", got, want)
		}
	}
	if err := srv.SyncStore(); err != nil {
		t.Fatal(err)
	}
	if got := l.take(); len(got) != 0 {
		t.Errorf("a round without writes synced %v", got)
	}
	if _, err := js.Publish(ctx, "s.2", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if err := srv.SyncStore(); err != nil {
		t.Fatal(err)
	}
	if got := l.take(); len(got) != 1 || !strings.HasSuffix(got[0], filepath.Join("S", "msgs", "1.blk")) {
		t.Errorf("a round after one ack synced %v, want the stream's block only", got)
	}
}

// A failing fsync fails the round.
func TestStoreSyncFailure(t *testing.T) {
	srv, js, l := startSyncServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	eio := errors.New("input/output error")
	l.fail = eio
	if err := srv.SyncStore(); !errors.Is(err, eio) {
		t.Fatalf("round with a failing fsync: %v, want %v", err, eio)
	}
}

// A stream whose configuration is updated without a new message (its
// meta.inf replaced, unsynced by nats-server) is synced by the record's
// next round: no sequence moved, yet a cut before a sync would drop the
// stream at restart.
func TestRecorderSyncsAConfigChangeWithoutMessages(t *testing.T) {
	srv, js, l := startSyncServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "CFG", Subjects: []string{"cfg.>"}, Storage: jetstream.FileStorage, MaxMsgs: 100}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "cfg.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	rec := StartRecorder(srv, dataDir, func(context.Context) error { return srv.SyncStore() }, discard())
	defer rec.Stop()
	// The first round records the stream (its sequence moved from nothing).
	waitFor(t, 5*time.Second, "the first record", func() bool {
		_, ok, err := ReadRecord(filepath.Join(dataDir, RecordFile))
		return ok && err == nil
	})
	cfg.MaxMsgs = 200
	l.take()
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*RecordInterval+2*time.Second, "a round syncing CFG's meta.inf after its update", func() bool {
		for _, p := range l.take() {
			if strings.HasSuffix(p, filepath.Join("streams", "CFG", "meta.inf")) {
				return true
			}
		}
		return false
	})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
