package durability

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/jstest"
	"github.com/sluice-dev/sluice/natsembed"
)

// syncLog records what a round synced (the real fsync still runs).
type syncLog struct {
	mu    sync.Mutex
	paths []string
	fail  error
	log   jstest.LogBuffer // the server's log
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

// syncModes are the two ways a round finds what changed: the inotify
// watch (where the platform has it) and the walk (stat everything).
var syncModes = []string{"watch", "walk"}

// forMode makes srv's rounds use mode, and checks they do.
func forMode(t *testing.T, srv *syncServer, mode string) {
	t.Helper()
	srv.store.mu.Lock()
	srv.store.walkOnly = mode == "walk"
	srv.store.mu.Unlock()
	if err := srv.SyncStore(); err != nil {
		t.Fatal(err)
	}
	srv.store.mu.Lock()
	defer srv.store.mu.Unlock()
	if (srv.store.watch != nil) != (mode == "watch") {
		t.Fatalf("mode %s: the rounds' watch is %v", mode, srv.store.watch)
	}
}

// inEachSyncMode runs test once per sync mode (a subtest each) on a fresh
// server whose rounds use that mode, with a context bounded to 10 s.
func inEachSyncMode(t *testing.T, test func(t *testing.T, ctx context.Context, srv *syncServer, js jetstream.JetStream, l *syncLog)) {
	for _, mode := range syncModes {
		t.Run(mode, func(t *testing.T) {
			ctx, srv, js, l := startInMode(t, mode)
			test(t, ctx, srv, js, l)
		})
	}
}

// startInMode starts a server whose rounds use mode, with a context bounded
// to 10 s that ends with the test.
func startInMode(t *testing.T, mode string) (context.Context, *syncServer, jetstream.JetStream, *syncLog) {
	t.Helper()
	srv, js, l := startSyncServer(t)
	forMode(t, srv, mode)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx, srv, js, l
}

// createSynced creates the stream S (subjects s.>) and runs a round, so
// that what the test writes next is all the next round has to sync.
func createSynced(t *testing.T, ctx context.Context, srv *syncServer, js jetstream.JetStream) {
	t.Helper()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.SyncStore(); err != nil {
		t.Fatal(err)
	}
}

// startSyncServer starts a server whose rounds' fsyncs the returned log
// records.
func startSyncServer(t *testing.T) (*syncServer, jetstream.JetStream, *syncLog) {
	t.Helper()
	l := &syncLog{}
	log := slog.New(slog.NewTextHandler(&l.log, nil))
	dir := t.TempDir()
	ns, _, js := jstest.Start(t, func() (*natsembed.Server, error) {
		return natsembed.StartServer(natsembed.ServerConfig{StoreDir: dir, Logger: log})
	})
	srv := &syncServer{Server: ns, store: newStoreSync(dir, log)}
	t.Cleanup(srv.store.close)
	srv.store.fsync = l.fsync
	return srv, js, l
}

// syncServer is an embedded server and the rounds of its store, as Start
// makes them.
type syncServer struct {
	*natsembed.Server
	store *storeSync
}

// storeOf is a syncServer over the store of a server already running.
func storeOf(t *testing.T, storeDir string) *syncServer {
	st := newStoreSync(storeDir, discard())
	t.Cleanup(st.close)
	return &syncServer{store: st}
}

func (s *syncServer) SyncStore() error   { return s.store.round() }
func (s *syncServer) SyncFinder() string { return s.store.finder() }

func hasSuffix(paths []string, suffix string) bool {
	return slices.ContainsFunc(paths, func(p string) bool { return strings.HasSuffix(p, suffix) })
}

// A round syncs what a restart needs of a new stream (its meta files, its
// directories, its block), then only the block that an ack wrote to, and
// nothing when nothing was written.
func TestStoreSyncRound(t *testing.T) { inEachSyncMode(t, testStoreSyncRound) }

func testStoreSyncRound(t *testing.T, ctx context.Context, srv *syncServer, js jetstream.JetStream, l *syncLog) {
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
func TestStoreSyncFailure(t *testing.T) { inEachSyncMode(t, testStoreSyncFailure) }

func testStoreSyncFailure(t *testing.T, ctx context.Context, srv *syncServer, js jetstream.JetStream, l *syncLog) {
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

// A new block (the last one full) is synced with its directory by the
// next round.
func TestStoreSyncNewBlock(t *testing.T) {
	inEachSyncMode(t, func(t *testing.T, ctx context.Context, srv *syncServer, js jetstream.JetStream, l *syncLog) {
		// A small MaxBytes makes the smallest blocks (FileStoreMinBlkSize).
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "B", Subjects: []string{"b.>"}, MaxBytes: 100_000}); err != nil {
			t.Fatal(err)
		}
		second := filepath.Join(srv.StoreDir(), "jetstream", "$G", "streams", "B", "msgs", "2.blk")
		body := make([]byte, 1024)
		for i := 0; ; i++ {
			if i == 200 {
				t.Fatal("no second block after 200 KiB")
			}
			if _, err := js.Publish(ctx, "b.x", body); err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(second)
			if err := srv.SyncStore(); err != nil {
				t.Fatal(err)
			}
			got := l.take()
			if statErr != nil {
				continue
			}
			for _, want := range []string{filepath.Join("B", "msgs", "2.blk"), filepath.Join("B", "msgs")} {
				if !hasSuffix(got, want) {
					t.Errorf("the round after the second block appeared synced %v: no %s", got, want)
				}
			}
			return
		}
	})
}

// A round that must cover a file another round is syncing right now (the
// other round took it, so this one's watch saw nothing new) returns only
// once that sync ended: released by a round that began after its writes,
// never before they are durable. No window stands for "it did not
// return": the block's sync is held until the second round is seen
// blocked in its wait for the flight (its goroutine's stack), and the
// second round must find, when it returns, that the sync had ended. Every
// wait is bounded: a broken round fails in seconds, never hangs.
func TestWatchedRoundWaitsForTheSyncInFlight(t *testing.T) {
	ctx, srv, js, l := startInMode(t, "watch")
	createSynced(t, ctx, srv, js)
	entered, gate := make(chan struct{}), make(chan struct{})
	var held, synced atomic.Bool // the block's first sync: held at the gate, then ended
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	defer open() // never leave a round stuck at the gate
	srv.store.mu.Lock()
	srv.store.fsync = func(f *os.File, data bool) error {
		if !strings.HasSuffix(f.Name(), ".blk") || !held.CompareAndSwap(false, true) {
			return l.fsync(f, data)
		}
		close(entered)
		<-gate
		err := l.fsync(f, data)
		synced.Store(true)
		return err
	}
	srv.store.mu.Unlock()
	if _, err := js.Publish(ctx, "s.1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		err    error
		synced bool // the block's sync had ended when the round returned
	}
	first, second := make(chan outcome, 1), make(chan outcome, 1)
	go func() { err := srv.SyncStore(); first <- outcome{err, synced.Load()} }()
	select {
	case <-entered: // the first round took the block and syncs it
	case o := <-first:
		t.Fatalf("the first round returned (%v) without syncing the block", o.err)
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10 s for the first round to sync the block")
	}
	go func() { err := srv.SyncStore(); second <- outcome{err, synced.Load()} }()
	deadline := time.After(10 * time.Second)
	for !blockedInWatchedRound() {
		select {
		case o := <-second:
			open()
			t.Fatalf("the second round returned (%v) while the block's sync was still running: it released its callers before the block was durable", o.err)
		case <-deadline:
			t.Fatal("after 10 s the second round neither returned nor waited for the block's sync in flight")
		case <-time.After(time.Millisecond):
		}
	}
	open()
	for _, r := range []struct {
		name string
		ch   chan outcome
	}{{"first", first}, {"second", second}} {
		select {
		case o := <-r.ch:
			if o.err != nil {
				t.Fatalf("the %s round: %v", r.name, o.err)
			}
			if !o.synced {
				t.Fatalf("the %s round returned before the block's sync ended", r.name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s round did not return within 10 s of the block's sync", r.name)
		}
	}
}

// blockedInWatchedRound reports whether a goroutine is blocked on a
// channel receive in watchedRound itself (its top frame): only the wait
// for another round's sync in flight receives there.
func blockedInWatchedRound() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, rest, _ := strings.Cut(g, "\n")
		top, _, _ := strings.Cut(rest, "\n")
		if strings.Contains(header, "[chan receive") && strings.Contains(top, "durability.(*storeSync).watchedRound(") {
			return true
		}
	}
	return false
}

// A watch that fails (here its inotify descriptor closed under it) is
// not a failed sync: the round falls back to the walk, which syncs
// everything, and later rounds walk.
func TestWatchFailureFallsBackToTheWalk(t *testing.T) {
	ctx, srv, js, l := startInMode(t, "watch")
	createSynced(t, ctx, srv, js)
	l.take()
	srv.store.mu.Lock()
	srv.store.watch.close()
	srv.store.mu.Unlock()
	if _, err := js.Publish(ctx, "s.1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := srv.SyncStore(); err != nil {
		t.Fatalf("the round after the watch failed: %v", err)
	}
	got := l.take()
	if !hasSuffix(got, filepath.Join("S", "msgs", "1.blk")) || !hasSuffix(got, filepath.Join("S", "meta.inf")) {
		t.Errorf("the fallback round synced %v: want everything, the block and the meta files too", got)
	}
	if srv.SyncFinder() != "stat walk" {
		t.Errorf("after the watch failed, rounds find changes by %q", srv.SyncFinder())
	}
	if !strings.Contains(l.log.String(), "the inotify watch failed") {
		t.Errorf("the change to the walk was not logged: %q", l.log.String())
	}
}

// A round returns only once every sync it started has ended: with each
// fsync taking a while (a slow disk; the power-cut harness's returns at
// once, so there a round that stopped waiting would go unseen), a round
// that released its callers while some ran would be seen with syncs in
// flight when it returns.
func TestStoreSyncRoundWaitsForItsSyncs(t *testing.T) {
	inEachSyncMode(t, func(t *testing.T, ctx context.Context, srv *syncServer, js jetstream.JetStream, l *syncLog) {
		var inFlight, ran atomic.Int64
		srv.store.mu.Lock()
		srv.store.fsync = func(f *os.File, data bool) error {
			inFlight.Add(1)
			defer inFlight.Add(-1)
			ran.Add(1)
			time.Sleep(5 * time.Millisecond) // the fsync's latency
			return l.fsync(f, data)
		}
		srv.store.mu.Unlock()
		// A new stream and a message: a round of several files.
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := js.Publish(ctx, "s.1", []byte("one")); err != nil {
				t.Fatal(err)
			}
			if err := srv.SyncStore(); err != nil {
				t.Fatal(err)
			}
			if n := inFlight.Load(); n != 0 {
				t.Fatalf("round %d returned with %d of its syncs still running", i+1, n)
			}
		}
		if ran.Load() < 2 {
			t.Fatalf("%d syncs ran: the test needs a round of several", ran.Load())
		}
	})
}
