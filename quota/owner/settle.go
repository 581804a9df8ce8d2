package owner

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// Settles in frames (frame.OpSettle) travel to the partition owner like
// hits and are answered once durable (WithSync). The owner remembers the
// claims it granted to frame hits (grants): a settle presenting exactly one
// (claim, hook id, revision) is one revision-checked write (SettleOwn), as
// that revision can only be that pending claim; any other is Settle's,
// which reads the holder first, so a revision learned about another holder
// is refused as on claims.settle.

// grantBytes bounds the memory of the grants record: two generations of at
// most half of it each; a claim not settled before it ages out is settled
// with the read, as any other.
const grantBytes = 8 << 20

// grantOverhead is what one entry costs beyond its strings (map slot,
// headers, revision).
const grantOverhead = 96

// grant is the holder and revision of a claim granted to a frame hit.
type grant struct {
	hookID string
	rev    uint64
}

// grants is a worker's bounded record of the claims it granted to frame
// hits, for their settles. Safe for concurrent use.
type grants struct {
	mu       sync.Mutex
	cur, old map[claims.ID]grant
	curBytes int
}

func newGrants() *grants {
	return &grants{cur: make(map[claims.ID]grant)}
}

// put records that id was granted to hookID at rev. Keys are kept as the
// store keeps them (claims.NormalizeKey), so a settle finds the grant
// whichever form of a long key it presents.
func (g *grants) put(id claims.ID, hookID string, rev uint64) {
	id.Key = claims.NormalizeKey(id.Key)
	n := grantOverhead + len(id.Tenant) + len(id.Source) + len(id.Key) + len(hookID)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.curBytes+n > grantBytes/2 {
		g.old, g.cur, g.curBytes = g.cur, make(map[claims.ID]grant, len(g.cur)), 0
	}
	g.cur[id] = grant{hookID: hookID, rev: rev}
	g.curBytes += n
}

// take reports whether id was granted to hookID at rev, and forgets it
// then (a settle is tried once; a retry reads).
func (g *grants) take(id claims.ID, hookID string, rev uint64) bool {
	id.Key = claims.NormalizeKey(id.Key)
	want := grant{hookID: hookID, rev: rev}
	g.mu.Lock()
	defer g.mu.Unlock()
	if gr, ok := g.cur[id]; ok && gr == want {
		delete(g.cur, id)
		return true
	}
	if gr, ok := g.old[id]; ok && gr == want {
		delete(g.old, id)
		return true
	}
	return false
}

// settleJob is one admitted settle item. Its answer goes to the item's
// slot of the frame's claimBatch.
type settleJob struct {
	t       *tenure
	item    int // index in the frame
	id      claims.ID
	hookID  string
	rev     uint64
	ttl     time.Duration
	timeout time.Duration
	granted bool // this worker granted exactly this claim: one write (grants)

	batch *claimBatch
	slot  int
}

// newSettleJob is the job of settle item it (validated), the index-th of
// its frame.
func (t *tenure) newSettleJob(it *frame.Item, index int) *settleJob {
	j := &settleJob{
		t:       t,
		item:    index,
		rev:     it.Revision,
		ttl:     claims.CommittedTTL(it.TTLMs, t.w.cfg.DedupeTTL),
		timeout: min(quota.DurationMs(it.TimeoutMs, protocol.DefaultTimeout), maxOwnerTimeout),
	}
	j.id, j.hookID = claimStrings(it)
	return j
}

// run commits the claim, makes it durable, and answers: in one write when
// this worker granted exactly that claim (see grants), else with the
// store's read of the holder first.
func (j *settleJob) run() {
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	j.answer(j.commit(ctx))
}

// commit is run's write and sync, for run and SettleLocal: one
// revision-checked write when this worker granted exactly that claim,
// else the store's read of the holder first; then the sync.
func (j *settleJob) commit(ctx context.Context) error {
	w := j.t.w
	var err error
	if j.granted {
		err = w.store.SettleOwn(ctx, j.id, j.hookID, "", j.rev, j.ttl)
	} else {
		err = w.store.Settle(ctx, j.id, j.hookID, j.rev, j.ttl)
	}
	if err == nil {
		err = durability.ForScope(durability.SyncWith(ctx, w.cfg.Sync), durability.SyncScope{Tenant: j.id.Tenant})
	}
	return err
}

// answer answers the settle with its outcome and finishes the job.
func (j *settleJob) answer(err error) {
	defer j.t.finish()
	a := settleAnswer(err)
	j.t.w.met.settle(a.Status)
	a.Index = j.item
	j.batch.answers[j.slot] = a
	j.batch.done(j.slot)
}

// startSettles runs the admitted settles of fs, answering into cb from
// slot first on: the granted ones the store can start go out at once and
// one runner collects and syncs them (collectSettles); every other settle
// runs on a runner of its own (settleJob.run).
func (w *Worker) startSettles(fs *frameScratch, cb *claimBatch, first int) {
	var started []startedSettle
	for k, j := range fs.settles {
		j.batch, j.slot = cb, first+k
		j.granted = w.grants.take(j.id, j.hookID, j.rev)
		if j.granted {
			if c, err := w.store.StartSettleOwn(j.id, j.hookID, j.rev, j.ttl); err == nil {
				started = append(started, startedSettle{j: j, c: c})
				continue
			}
		}
		w.runners.run(j.run)
	}
	if len(started) > 0 {
		w.runners.run(func() { w.collectSettles(started) })
	}
}

// startedSettle is a settle job whose write is in flight.
type startedSettle struct {
	j *settleJob
	c claims.StartedSettle
}

// collectSettles waits for the writes of started (as collectClaims), makes
// the landed ones durable with one sync and answers them; a refused write
// goes to a runner for SettleOwn's full path.
func (w *Worker) collectSettles(started []startedSettle) {
	timeout := started[0].j.timeout
	for _, s := range started[1:] {
		timeout = max(timeout, s.j.timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	landed := make([]*settleJob, 0, len(started))
	for _, s := range started {
		done, err := s.c.Wait(ctx)
		switch {
		case !done:
			w.runners.run(s.j.run)
		case err != nil:
			s.j.answer(err)
		default:
			landed = append(landed, s.j)
		}
	}
	if len(landed) == 0 {
		cancel()
		return
	}
	// With the group sync, the round's own goroutine answers them: no
	// wake-up of this runner between the round and the reply. A round
	// that has not ended by the deadline (a stuck disk) answers them
	// unavailable (SyncThen), so the jobs finish and the worker can stop.
	durability.SyncThen(ctx, w.cfg.Sync, func(err error) {
		cancel()
		for _, j := range landed {
			j.answer(durability.ForScope(err, durability.SyncScope{Tenant: j.id.Tenant}))
		}
	})
}

// settleAnswer is a settle's answer to its outcome: ok, claim_lost (409),
// invalid (400) or unavailable (503: the store or the sync failed; the
// claim may be committed and not yet durable, and a retry is claim_lost).
func settleAnswer(err error) frame.Answer {
	switch {
	case err == nil:
		return frame.Answer{Result: frame.ResultOK}
	case errors.Is(err, protocol.ErrClaimLost):
		return frame.Answer{Status: frame.StatusLost, Reason: err.Error()}
	case errors.Is(err, protocol.ErrInvalid):
		return frame.Answer{Status: frame.StatusInvalid, Reason: err.Error()}
	}
	return frame.Answer{Status: frame.StatusUnavailable, Reason: "claims: " + err.Error()}
}
