package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/faults/internal/lazyfs"
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
}

// powerCutModes: the default durability (synced: a group commit before
// every 2xx) against acked (a 2xx after JetStream's ack, the page cache;
// --accept-data-loss lets it restart on what a cut left).
var powerCutModes = []powerCutMode{
	{name: "synced", lossless: true, young: 7, old: 3},
	{name: "acked", args: []string{"--durability", "acked", "--accept-data-loss=true"}, young: 3, old: 1},
}

// TestPowerCut runs the edge (the single binary, embedded server) with its
// data dir on a lazyfs mount (package faults/internal/lazyfs: file data
// written but not fsynced, fdatasynced or written O_SYNC is lost by a
// cut; names are durable at once), under load from 16 concurrent clients
// with a dedupe key of their own per hook; then, again and again, kill -9
// and a power cut at once, and a restart on what the disk kept. After each
// restart every hook answered 2xx must be in HOOKS and its key must answer
// a redelivery 200 as a duplicate naming the same hook — in a lossless
// mode. The mode with the defaults must lose hooks.
func TestPowerCut(t *testing.T) {
	t.Parallel()
	for _, m := range powerCutModes {
		t.Run(m.name, m.run)
	}
}

// powerCutTotals add up a mode's cuts.
type powerCutTotals struct {
	cuts, acked, lost, dup, fresh, other int
}

func (m powerCutMode) run(t *testing.T) {
	dir := t.TempDir()
	mnt, disk := filepath.Join(dir, "mnt"), filepath.Join(dir, "disk")
	for _, d := range []string{mnt, disk} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fs := lazyfs.MountForTest(t, mnt, disk)
	h := Start(t, Options{Servers: 1, Embedded: true, Exclusive: true, DataDir: mnt, Args: append([]string{"--sync-interval", powerCutSyncInterval.String()}, m.args...)})
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
		answered := l.Answered(prefix)
		stored := storedIDs(h.Stored(t))
		lost := 0
		for _, ids := range answered {
			if !slices.ContainsFunc(ids, func(id string) bool { return stored[id] }) {
				lost++
			}
		}
		dup, fresh, other := h.redeliver(l, answered)
		tot.cuts++
		tot.acked += len(answered)
		tot.lost += lost
		tot.dup += dup
		tot.fresh += fresh
		tot.other += other
		kind := "young"
		if old {
			kind = "old"
		}
		t.Logf("cut %d (%s, node up %v): %d hooks answered 2xx, %d lost; redelivered: %d duplicate, %d stored anew, %d other; the cut dropped %d bytes of %d files",
			c, kind, uptime.Round(100*time.Millisecond), len(answered), lost, dup, fresh, other, loss.Bytes, loss.Files)
	}
	st := fs.Stats()
	t.Logf("%s: %d cuts, %d hooks answered 2xx, %d lost, %d redeliveries not answered as duplicates (%d stored anew, %d other); lazyfs served %d writes (%d O_SYNC) and %d fsyncs",
		m.name, tot.cuts, tot.acked, tot.lost, tot.fresh+tot.other, tot.fresh, tot.other, st.Writes, st.SyncWrites, st.Fsyncs)
	if tot.acked == 0 {
		t.Fatal("no hook answered 2xx")
	}
	if m.lossless {
		if tot.lost > 0 || tot.fresh+tot.other > 0 {
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
// nodes (--sync-interval; the default, 2 minutes, is too long for CI): an
// old cut comes after two of them.
const powerCutSyncInterval = time.Second

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
// naming a hook the key was answered with (a duplicate), 202 (stored
// anew: the claim was lost), anything else.
func (h *Harness) redeliver(l *Ledger, answered map[HookKey][]string) (dup, fresh, other int) {
	keys := make(chan HookKey)
	var d, f, o atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range keys {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				code, id, err := h.PostHook(ctx, 0, k, hookBody)
				cancel()
				switch {
				case err != nil && code != 0:
					l.Bad(k, code, err.Error())
					o.Add(1)
				case code == 200 && slices.Contains(answered[k], id):
					l.Hook(k, code, id)
					d.Add(1)
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
	return int(d.Load()), int(f.Load()), int(o.Load())
}
