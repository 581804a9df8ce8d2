package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// reserveCutMode is one durability setting of TestPowerCutReserve.
type reserveCutMode struct {
	name string
	args []string
	// exact: no counter may grant beyond max after a cut. Otherwise some
	// cut must make one do so: that is how the test knows the harness
	// bites (the counts' writes of the last moment are lost).
	exact bool
	// cuts in a run, longCuts under -faults.long (acked went beyond max
	// in every one of 3 cuts when measured: one shows the harness bites).
	cuts, longCuts int
}

var reserveCutModes = []reserveCutMode{
	{name: "synced", exact: true, cuts: 2, longCuts: 6},
	{name: "acked", args: []string{"--durability", "acked", "--accept-data-loss=true"}, cuts: 1, longCuts: 3},
}

// Reserve load of TestPowerCutReserve: counter 0 of slotMax slots raced
// for by slotWorkers workers that take a named slot, hold it a moment,
// and release it; counter 1 filled just before each cut.
const (
	slotCounters = 2
	slotMax      = 3
	slotWorkers  = 16
	slotTTLMs    = 5 * 60 * 1000 // outlives the test: no held slot expires
)

// slot states in the test's book of one cut's named slots.
const (
	slotReserving = iota // sent, unanswered: may be held
	slotHeld             // answered granted, no release sent
	slotReleasing        // release sent, unanswered: may be held
)

// TestPowerCutReserve runs the edge (embedded server, data dir on the
// lazyfs harness) under a reserve/release load through the service
// (sluice.v1.quota.reserve, named slots), and then kill -9 and a power
// cut at once, and a restart on what the disk kept. Every slot answered
// granted before the cut and not released is still held by its holder;
// every slot whose reserve or release was unanswered at the cut is
// released again (by its id: idempotent). Then new reserves race for each
// counter: the held slots plus the new grants must not exceed max — at
// the default durability (synced: a grant waits for its count's sync). At
// acked (the grant's write in the page cache) a cut must make some
// counter undercount and grant beyond max.
func TestPowerCutReserve(t *testing.T) {
	t.Parallel()
	for _, m := range reserveCutModes {
		t.Run(m.name, m.run)
	}
}

func (m reserveCutMode) run(t *testing.T) {
	if *longRun {
		m.cuts = m.longCuts
	}
	fs, mnt, _ := powerCutMount(t)
	h := Start(t, Options{Servers: 1, Embedded: true, Exclusive: true, DataDir: mnt, Args: append(powerCutSyncArgs(t), m.args...)})
	node := h.Node(0)
	parts := make([]int, slotCounters)
	principals := make([]string, slotCounters)
	for i := range principals {
		parts[i] = i % h.o.Partitions
		principals[i] = h.Principal(fmt.Sprintf("slots%d", i), parts[i])
	}
	var grants, over, overCuts int
	// The load goes to the partitions' owner, not to the node-local
	// fallback (which answers reserves with an error): wait for node 0 to
	// hold their leases, as after each restart.
	h.waitOwned(t, 30*time.Second, parts...)
	for c := range m.cuts {
		key := fmt.Sprintf("cut%d", c)
		b := newSlotBook()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var granted, errs atomic.Int64
		for w := range slotWorkers {
			wg.Go(func() {
				h.slotWorker(ctx, t, b, principals[0], key, 0, fmt.Sprintf("w%d", w), &granted, &errs)
			})
		}
		// Until enough grants, or until every worker has stopped on a
		// failed call (nothing more would come: fail below, at once).
		deadline := time.Now().Add(30 * time.Second)
		for granted.Load() < int64(scale(100)) && errs.Load() < slotWorkers && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := errs.Load(); n == slotWorkers {
			cancel()
			wg.Wait()
			t.Fatalf("cut %d: every worker stopped on a failed call before the cut (%d granted)", c, granted.Load())
		}
		// A moment into the next second of load: the cut falls at a
		// different place of the record's one-second round each time.
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
		// Counter 1 fills up just before the cut: every earlier state of
		// it is empty, so a lost grant shows (counter 0 is always full:
		// any earlier state of it is full too).
		var fill sync.WaitGroup
		for j := range slotMax {
			fill.Go(func() {
				id := fmt.Sprintf("fill-%d", j)
				b.set(1, id, slotReserving)
				var rep struct {
					Granted bool `json:"granted"`
				}
				if h.slotCall(context.Background(), "reserve", map[string]any{"principal": principals[1], "key": key, "max": slotMax, "ttl_ms": slotTTLMs, "request_id": id}, &rep) && rep.Granted {
					b.set(1, id, slotHeld)
					granted.Add(1)
				}
			})
		}
		fill.Wait()
		node.Kill()
		cancel()
		wg.Wait()
		if granted.Load() == 0 {
			t.Fatalf("cut %d: no reserve granted (%d errors)", c, errs.Load())
		}
		loss, err := fs.Cut()
		if err != nil {
			t.Fatalf("cut %d: %v", c, err)
		}
		node.Restart(t)
		h.waitOwned(t, 30*time.Second, parts...)

		// Unanswered reserves and releases: released by their id (a
		// slot that was never taken, or was freed, frees nothing more).
		held := make([]int, slotCounters)
		for i := range slotCounters {
			for id, st := range b.slots[i] {
				if st == slotHeld {
					held[i]++
					continue
				}
				h.mustSlotCall(t, "release", map[string]any{"principal": principals[i], "key": key, "request_id": id}, nil)
			}
		}
		// New holders race for every counter.
		cutOver := 0
		for i := range slotCounters {
			fresh := 0
			for j := range slotMax + 2 {
				var rep struct {
					Granted bool  `json:"granted"`
					Count   int64 `json:"count"`
				}
				h.mustSlotCall(t, "reserve", map[string]any{"principal": principals[i], "key": key, "max": slotMax, "ttl_ms": slotTTLMs, "request_id": fmt.Sprintf("after-%d", j)}, &rep)
				if rep.Granted {
					fresh++
				}
			}
			if n := held[i] + fresh - slotMax; n > 0 {
				cutOver += n
				t.Logf("cut %d: counter %d granted %d new slots with %d held before the cut still held: %d beyond max %d", c, i, fresh, held[i], n, slotMax)
			}
		}
		grants += int(granted.Load())
		over += cutOver
		if cutOver > 0 {
			overCuts++
		}
		t.Logf("cut %d: %d reserves granted (%d calls failed at the cut); held at the cut %v; %d slots beyond max after the restart; the cut dropped %d bytes of %d files",
			c, granted.Load(), errs.Load(), held, cutOver, loss.Bytes, loss.Files)
	}
	t.Logf("%s: %d cuts, %d reserves granted, %d slots granted beyond max in %d cuts", m.name, m.cuts, grants, over, overCuts)
	if m.exact && over > 0 {
		t.Errorf("%s: after power cuts counters granted %d slots beyond max", m.name, over)
	}
	if !m.exact && over == 0 {
		t.Errorf("%s: no counter granted beyond max over %d cuts: the harness does not bite", m.name, m.cuts)
	}
}

// slotBook is one cut's record of the named slots of each counter.
type slotBook struct {
	mu    sync.Mutex
	slots [slotCounters]map[string]int // id -> slot state; absent: not held
}

func newSlotBook() *slotBook {
	b := &slotBook{}
	for i := range b.slots {
		b.slots[i] = map[string]int{}
	}
	return b
}

func (b *slotBook) set(i int, id string, st int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.slots[i][id] = st
}

func (b *slotBook) drop(i int, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.slots[i], id)
}

// held is the number of counter i's slots answered granted and not yet
// released (sent).
func (b *slotBook) held(i int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, st := range b.slots[i] {
		if st == slotHeld {
			n++
		}
	}
	return n
}

// slotWorker takes named slots of counter i (principal, key) until ctx
// ends or a call fails (the node was killed): reserve, hold 50–150 ms,
// release, recording each step in b before it is sent or once answered.
// Before the cut the counter must never let more than max be held.
func (h *Harness) slotWorker(ctx context.Context, t *testing.T, b *slotBook, principal, key string, i int, name string, granted, errs *atomic.Int64) {
	for seq := 0; ctx.Err() == nil; seq++ {
		id := fmt.Sprintf("%s-%d", name, seq)
		b.set(i, id, slotReserving)
		var rep struct {
			Granted bool  `json:"granted"`
			Count   int64 `json:"count"`
		}
		if !h.slotCall(ctx, "reserve", map[string]any{"principal": principal, "key": key, "max": slotMax, "ttl_ms": slotTTLMs, "request_id": id}, &rep) {
			errs.Add(1)
			return // the slot stays unanswered
		}
		if !rep.Granted {
			b.drop(i, id)
			sleepCtx(ctx, 2*time.Millisecond)
			continue
		}
		b.set(i, id, slotHeld)
		granted.Add(1)
		if n := b.held(i); n > slotMax || rep.Count > slotMax {
			t.Errorf("counter %s/%s: %d slots held, granted with count %d, max %d", principal, key, n, rep.Count, slotMax)
		}
		sleepCtx(ctx, time.Duration(50+rand.IntN(100))*time.Millisecond)
		if ctx.Err() != nil {
			return // stopped at the cut: the slot stays held
		}
		b.set(i, id, slotReleasing)
		if !h.slotCall(ctx, "release", map[string]any{"principal": principal, "key": key, "request_id": id}, nil) {
			errs.Add(1)
			return
		}
		b.drop(i, id)
	}
}

// slotCall sends a quota call and decodes its reply into rep: false on
// any error (no answer, an error reply).
func (h *Harness) slotCall(ctx context.Context, op string, req, rep any) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	data, code, err := h.Request(cctx, "quota."+op, req)
	if err != nil || code != "" {
		return false
	}
	return rep == nil || json.Unmarshal(data, rep) == nil
}

// mustSlotCall is slotCall after the restart, retried for a while.
func (h *Harness) mustSlotCall(t *testing.T, op string, req, rep any) {
	t.Helper()
	for attempt := 1; !h.slotCall(context.Background(), op, req, rep); attempt++ {
		if attempt == 20 {
			t.Fatalf("quota.%s %v failed %d times after the restart", op, req, attempt)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitOwned waits until node 0's current incarnation holds the lease of
// every partition of ps, so that a reserve reaches an owner (which reads
// the counts bucket), not the node-local fallback (which knows nothing of
// the slots held before the restart).
func (h *Harness) waitOwned(t *testing.T, timeout time.Duration, ps ...int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, n := range ps {
		for h.Owner(n) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("partition %d not owned by the restarted node within %v", n, timeout)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	h.WaitServed(t, timeout, ps...)
}
