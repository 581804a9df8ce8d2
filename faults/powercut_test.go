package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/testkit"
)

// powerCutMode is one durability setting of TestPowerCut.
type powerCutMode struct {
	name string
	args []string // edge flags
	// lossless: every hook answered 2xx must survive every cut, and its
	// key must answer a redelivery as a duplicate. Otherwise the mode
	// must lose some: that is how the test knows the harness bites.
	lossless bool
	young    int // cuts within seconds of a start
	old      int // cuts after the node ran past nats-server's sync interval
	// syncLatency is how long each fsync of the disk takes
	// (lazyOptions.SyncLatency): the window in which a group commit
	// that released its callers before its round's fsync had finished
	// would lose what it acknowledged. With fsyncs that return at once
	// there is no such window to cut into.
	syncLatency time.Duration
}

// powerCutModes: the default durability (synced: a group commit before
// every 2xx) against acked (a 2xx after JetStream's ack, the page cache;
// --accept-data-loss lets it restart on what a cut left).
// Under -faults.long the synced mode cuts 7 young and 3 old.
var powerCutModes = []powerCutMode{
	{name: "synced", lossless: true, young: 4, old: 2, syncLatency: 3 * time.Millisecond},
	{name: "acked", args: []string{"--durability", "acked", "--accept-data-loss=true"}, young: 3, old: 1},
}

// TestPowerCut runs the edge (the single binary, embedded server) with its
// data dir on a lazyfs mount (lazyfs_test.go: file data
// written but not fsynced, fdatasynced or written O_SYNC is lost by a
// cut; names are durable at once), under load from 16 concurrent clients
// with a dedupe key of their own per hook; then, again and again, kill -9
// and a power cut at once, and a restart on what the disk kept. After each
// restart every hook answered 2xx must be in HOOKS and its key must answer
// a redelivery 200 as a duplicate naming the same hook — in a lossless
// mode. The mode without the barrier (acked) must lose hooks. The synced
// mode's disk takes 3 ms per fsync, so that a cut can land while a round's
// fsync is in flight: a 2xx given before it returned would be lost.
func TestPowerCut(t *testing.T) {
	t.Parallel()
	for _, m := range powerCutModes {
		t.Run(m.name, m.run)
	}
}

// powerCutTotals add up a mode's cuts.
type powerCutTotals struct {
	cuts, acked, lost, dup, dupLost, fresh, other int
}

// add adds c (one cut's totals) into t.
func (t *powerCutTotals) add(c powerCutTotals) {
	t.cuts += c.cuts
	t.acked += c.acked
	t.lost += c.lost
	t.dup += c.dup
	t.dupLost += c.dupLost
	t.fresh += c.fresh
	t.other += c.other
}

// afterCut checks, once the nodes are up again after a cut, the hooks of
// the cut's load (ids starting with prefix): each hook answered 2xx is
// stored or lost, and each key is redelivered once (redeliver). The
// counts are one cut's totals.
func (h *Harness) afterCut(t *testing.T, l *Ledger, prefix string) powerCutTotals {
	t.Helper()
	answered := l.Answered(prefix)
	stored := storedIDs(h.Stored(t))
	c := powerCutTotals{cuts: 1, acked: len(answered)}
	for _, ids := range answered {
		if !slices.ContainsFunc(ids, func(id string) bool { return stored[id] }) {
			c.lost++
		}
	}
	c.dup, c.dupLost, c.fresh, c.other = h.redeliver(l, answered, stored)
	return c
}

// powerCutMount mounts a lazyfs for a test: the mount, where the nodes'
// data dirs go, over the backing directory disk.
func powerCutMount(t *testing.T) (fs *lazyFS, mnt, disk string) {
	t.Helper()
	return powerCutMountWith(t, lazyOptions{})
}

// powerCutMountWith is powerCutMount with the disk's options.
func powerCutMountWith(t *testing.T, opts lazyOptions) (fs *lazyFS, mnt, disk string) {
	t.Helper()
	dir := t.TempDir()
	mnt, disk = filepath.Join(dir, "mnt"), filepath.Join(dir, "disk")
	for _, d := range []string{mnt, disk} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return lazyFSForTestWith(t, mnt, disk, opts), mnt, disk
}

func (m powerCutMode) run(t *testing.T) {
	if *longRun && m.lossless {
		m.young, m.old = 7, 3
	}
	fs, mnt, _ := powerCutMountWith(t, lazyOptions{SyncLatency: m.syncLatency})
	h := Start(t, Options{Servers: 1, Embedded: true, Exclusive: true, DataDir: mnt, Args: append(powerCutSyncArgs(t), m.args...)})
	node := h.Node(0)
	l := NewLedger()
	var tot powerCutTotals
	up := time.Now()
	for c := range m.young + m.old {
		// The old cuts come last but one: the node has also restarted
		// on data that went through cuts before.
		old := c >= m.young-1 && c < m.young-1+m.old
		prefix := fmt.Sprintf("cut%d-", c)
		run := h.startHooks(l, hookLoad{Tenants: []string{"a", "b", "c", "d"}, Workers: 16, Prefix: prefix[:len(prefix)-1]})
		if err := run.waitAccepted(int64(scale(300)), scaleD(30*time.Second)); err != nil {
			run.stop()
			t.Fatalf("cut %d: %v", c, err)
		}
		if old {
			waitFor(up.Add(2 * powerCutSyncInterval))
		}
		uptime := time.Since(up)
		node.Kill()
		run.stop()
		loss, err := fs.Cut()
		if err != nil {
			t.Fatalf("cut %d: %v", c, err)
		}
		node.Restart(t)
		up = time.Now()
		cut := h.afterCut(t, l, prefix)
		tot.add(cut)
		kind := "young"
		if old {
			kind = "old"
		}
		t.Logf("cut %d (%s, node up %v): %d hooks answered 2xx, %d lost; redelivered: %d duplicate (%d of them naming a lost hook), %d stored anew, %d other; the cut dropped %d bytes of %d files",
			c, kind, uptime.Round(100*time.Millisecond), cut.acked, cut.lost, cut.dup, cut.dupLost, cut.fresh, cut.other, loss.Bytes, loss.Files)
	}
	st := fs.Stats()
	t.Logf("%s: %d cuts, %d hooks answered 2xx, %d lost, %d redeliveries answered as duplicates naming a lost hook, %d not answered as duplicates (%d stored anew, %d other); lazyfs served %d writes (%d O_SYNC) and %d fsyncs",
		m.name, tot.cuts, tot.acked, tot.lost, tot.dupLost, tot.fresh+tot.other, tot.fresh, tot.other, st.Writes, st.SyncWrites, st.Fsyncs)
	if tot.acked == 0 {
		t.Fatal("no hook answered 2xx")
	}
	if m.lossless {
		if tot.lost > 0 || tot.dupLost > 0 || tot.fresh+tot.other > 0 {
			t.Errorf("%s: %d of %d hooks answered 2xx lost by power cuts, %d redeliveries not answered as duplicates", m.name, tot.lost, tot.acked, tot.fresh+tot.other)
		}
		h.CheckHooks(t, l, false)
		return
	}
	if tot.lost == 0 {
		t.Errorf("%s: no hook lost over %d cuts: the harness does not bite", m.name, tot.cuts)
	}
}

// powerCutSyncInterval is the nats-server sync interval of the test's
// nodes (sync_interval in --nats-config; the default, 2 minutes, is too
// long for CI): an
// old cut comes after two of them.
const powerCutSyncInterval = time.Second

// powerCutSyncArgs give a single node powerCutSyncInterval: the
// jetstream block of a --nats-config file.
func powerCutSyncArgs(t *testing.T) []string {
	return []string{"--nats-config", writeNATSConf(t, fmt.Sprintf("jetstream { sync_interval: %s }", powerCutSyncInterval))}
}

// writeNATSConf writes a nats-server configuration file for a node's
// --nats-config.
func writeNATSConf(t *testing.T, text string) string {
	t.Helper()
	return testkit.WriteTemp(t, "nats.conf", []byte(text+"\n"))
}

// waitFor returns at deadline.
func waitFor(deadline time.Time) {
	if d := time.Until(deadline); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		<-t.C
	}
}

// storedIDs is the set of the hooks' ids.
func storedIDs(hs []StoredHook) map[string]bool {
	out := make(map[string]bool, len(hs))
	for _, h := range hs {
		out[h.ID] = true
	}
	return out
}

// redeliver sends every key of answered once more to node 0, as its
// sender's redelivery, recording the answers in l, and counts them: 200
// naming a hook the key was answered with (a duplicate; dupLost of them
// name a hook that is not stored: the claim survived, the hook did not),
// 202 (stored anew: the claim was lost), anything else. A 503 is sent
// again after its Retry-After, as a sender does (a node just up under
// load may not vouch for an answer within its budget: a 503 is the
// documented answer then, not a verdict on the key), for up to 30 s; the
// answer that is not a 503 is the one counted.
func (h *Harness) redeliver(l *Ledger, answered map[HookKey][]string, stored map[string]bool) (dup, dupLost, fresh, other int) {
	keys := make(chan HookKey)
	var d, dl, f, o atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range keys {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				code, id, hdr, err := h.postHook(ctx, 0, k, hookBody)
			retry:
				for err == nil && code == 503 {
					wait, _ := strconv.Atoi(hdr.Get("Retry-After")) // whole seconds >= 1: postHook checked
					select {
					case <-ctx.Done():
						break retry // counted below as the 503 it is
					case <-time.After(time.Duration(wait) * time.Second):
					}
					l.Hook(k, code, id) // the 503, sent again
					code, id, hdr, err = h.postHook(ctx, 0, k, hookBody)
				}
				cancel()
				switch {
				case err != nil && code != 0:
					l.Bad(k, code, err.Error())
					o.Add(1)
				case code == 200 && slices.Contains(answered[k], id):
					l.Hook(k, code, id)
					d.Add(1)
					if !stored[id] {
						dl.Add(1)
					}
				case code == 202:
					l.Hook(k, code, id)
					f.Add(1)
				default:
					l.Hook(k, code, id)
					o.Add(1)
				}
			}
		})
	}
	for k := range answered {
		keys <- k
	}
	close(keys)
	wg.Wait()
	return int(d.Load()), int(dl.Load()), int(f.Load()), int(o.Load())
}

// TestPowerCutRefusesToComeUpEmpty: a power cut that loses a stream's
// metadata — nats-server replaces meta.inf (a temporary file renamed over
// it, not synced) when a stream's configuration changes, and drops a
// stream whose meta.inf is empty at start — must not bring the node up
// silently empty: it refuses to start, naming HOOKS and the flag, and
// starts with --accept-data-loss. At the acked level and at the default.
func TestPowerCutRefusesToComeUpEmpty(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"acked", "synced"} {
		t.Run(level, func(t *testing.T) { refusesToComeUpEmpty(t, level) })
	}
}

func refusesToComeUpEmpty(t *testing.T, level string) {
	fs, mnt, disk := powerCutMount(t)
	h := Start(t, Options{Servers: 1, Embedded: true, Exclusive: true, DataDir: mnt, Args: []string{"--durability", level}})
	node := h.Node(0)
	l := NewLedger()
	run := h.startHooks(l, hookLoad{Workers: 8, Prefix: "empty"})
	err := run.waitAccepted(int64(scale(300)), scaleD(30*time.Second))
	run.stop()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := h.JS()
	st, err := js.Stream(ctx, "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	// The record (read on the disk: the mount's caches may lag a
	// rename) must hold HOOKS as it is: what the guard compares with.
	recPath := filepath.Join(disk, "node0", durability.RecordFile)
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := waitRecord(t, recPath, 10*time.Second, func(r durability.Record) bool { return r.Streams["HOOKS"] >= info.State.LastSeq })
	if rec.Streams["HOOKS"] < info.State.LastSeq {
		t.Fatalf("the record %+v does not reach HOOKS' last sequence %d", rec, info.State.LastSeq)
	}
	meta := filepath.Join(disk, "node0", "jetstream", "jetstream", "$G", "streams", "HOOKS", "meta.inf")
	for attempt := 1; ; attempt++ {
		// Right after a round of the record (the next is a second away;
		// none comes while no stream moves), HOOKS' configuration
		// changes, then kill -9 and the cut.
		rec = waitRecord(t, recPath, 2500*time.Millisecond, func(r durability.Record) bool { return !r.Updated.Equal(rec.Updated) })
		cfg := info.Config
		cfg.Description = fmt.Sprintf("power cut %d", attempt)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		node.Kill()
		if _, err := fs.Cut(); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(meta)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() == 0 {
			t.Logf("attempt %d: the cut left HOOKS' meta.inf empty (after %d hooks answered 2xx)", attempt, l.Accepted())
			break
		}
		// A round of the record synced the new meta.inf before the kill.
		if attempt == 3 {
			t.Fatalf("%d cuts right after a change of HOOKS' configuration kept its meta.inf (%d bytes)", attempt, fi.Size())
		}
		node.Restart(t)
		if st, err = js.Stream(ctx, "HOOKS"); err != nil {
			t.Fatal(err)
		}
		if info, err = st.Info(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Without the flag: a refusal naming what is missing and the flag.
	p, err := startProc(t, "edge0-refused", h.edge, nil, append(node.args(), "--log-format", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.waitLine(60*time.Second, func(l string) bool { return strings.Contains(l, "edge listening") }); err == nil {
		t.Fatalf("the node came up on a store that lost HOOKS:\n%s", p.out.tail(20))
	} else if p.running() {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	out := p.out.text()
	if !errors.As(p.err, &exit) || exit.ExitCode() == 0 || !strings.Contains(out, "stream HOOKS is missing") || !strings.Contains(out, "--accept-data-loss=true") {
		t.Fatalf("the node on a store that lost HOOKS: exit %v, want a refusal naming HOOKS and --accept-data-loss:\n%s", p.err, p.out.tail(20))
	}
	t.Logf("refused: %s", p.out.tail(1))
	// With it: up, on what is left.
	h.o.Args = append(h.o.Args, "--accept-data-loss=true")
	node.Restart(t)
	stored := h.Stored(t)
	code, _, err := h.PostHook(ctx, 0, HookKey{"t", "s", "after-the-loss"}, hookBody)
	if err != nil || code != 202 {
		t.Fatalf("a hook after the accepted loss: %d %v", code, err)
	}
	t.Logf("started with --accept-data-loss: HOOKS holds %d of the %d hooks answered 2xx before the cut, and takes new ones", len(stored), l.Accepted())
}

// waitRecord waits until the record at path satisfies ok and returns it;
// after timeout it returns the last one read (the caller decides).
func waitRecord(t *testing.T, path string, timeout time.Duration, ok func(durability.Record) bool) durability.Record {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rec, found, err := durability.ReadRecord(path)
		if err != nil {
			t.Fatal(err)
		}
		if found && ok(rec) || time.Now().After(deadline) {
			return rec
		}
		time.Sleep(5 * time.Millisecond)
	}
}
