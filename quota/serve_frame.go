package quota

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
)

// frameScratch is the reusable state of serving one frame.
type frameScratch struct {
	items   []wireHit
	answers []answer
	limits  []limitPair
	refs    []bucketRef
	lims    []gcra.Limit
	decs    []gcra.Decision
	claims  []*claimJob
	buf     []byte
}

var scratchPool = sync.Pool{New: func() any { return new(frameScratch) }}

// claimJob is one admitted hit of a frame that waits on a claim create.
type claimJob struct {
	t       *tenure
	batch   *claimBatch
	item    int // index in the frame
	slot    int // index in batch.answers
	id      claims.ID
	hookID  string
	pending time.Duration
	timeout time.Duration
	refs    []bucketRef
	lims    []gcra.Limit
	limits  []limitPair
}

// claimBatch collects the answers of a frame's claims and sends them
// together: when the last one is done, or claimLinger after an answer is
// ready while others still wait on KV (a slow create delays the others of
// its frame by that much, not by its own deadline).
type claimBatch struct {
	w       *Worker
	reply   string
	answers []answer // by job slot; written by the job before it reports

	mu      sync.Mutex // held while a reply is built and published (replies stay in order)
	left    int
	pending []int // slots answered and not yet sent
	timer   *time.Timer
}

// claimLinger bounds how long a claim's answer waits for the other claims
// of its frame.
const claimLinger = time.Millisecond

// serveFrame serves a batch frame (frame.go) that reached the worker on its
// member subject or on a partition subject: every item is decided by the
// tenure serving the item's partition — one lock acquisition per run of
// items of one partition — and answered in one reply; items that take a
// claim are answered together in a second reply once their creates are
// done. An item whose partition is not served here (any more) is answered
// not_owner on its own; the client retries it alone.
func (w *Worker) serveFrame(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	fs := scratchPool.Get().(*frameScratch)
	defer func() {
		fs.claims = fs.claims[:0]
		scratchPool.Put(fs)
	}()
	items, err := decodeRequestFrame(m.Data, fs.items)
	fs.items = items
	if err != nil {
		respondError(m, 400, "invalid_request: "+err.Error())
		return
	}
	now := gcra.Micros(w.cfg.now())
	answers := fs.answers[:0]
	limits := fs.limits[:0]
	var cur *tenure
	unlock := func() {
		if cur != nil {
			cur.mu.Unlock()
			cur = nil
		}
	}
	for i := range items {
		it := &items[i]
		if !it.fastValid() {
			req := it.request()
			if err := validateHit(&req); err != nil {
				w.met.hit("invalid")
				answers = append(answers, answer{index: i, status: stInvalid, reason: err.Error()})
				continue
			}
		}
		p := partitionBytes(it.tenant, w.cfg.partitions)
		if p != it.n {
			w.met.hit("invalid")
			answers = append(answers, answer{index: i, status: stInvalid, reason: misrouted(p, w.cfg.partitions, it.n)})
			continue
		}
		t := w.served[p].Load()
		if t == nil || !t.serving() {
			answers = append(answers, answer{index: i, status: stNotOwner, reason: reasonNotOwner})
			continue
		}
		if t != cur {
			unlock()
			t.mu.Lock()
			cur = t
		}
		nc := len(it.charges)
		refs, lims, decs := fs.refs[:0], fs.lims[:0], fs.decs[:0]
		for _, c := range it.charges {
			refs = append(refs, t.state.ref(c.kind, it.tenant, true))
			lims = append(lims, gcra.Limit{Increment: c.inc, Capacity: c.cap})
			decs = append(decs, gcra.Decision{})
		}
		fs.refs, fs.lims, fs.decs = refs, lims, decs
		allowed, retry := t.charge(refs, lims, decs, now)
		start := len(limits)
		for k := range nc {
			limits = append(limits, limitOf(lims[k].Increment, decs[k], allowed))
		}
		switch {
		case !allowed:
			w.met.hit(ResultRateLimited)
			answers = append(answers, answer{index: i, result: 4, retryMs: ceilMs(retry), limits: limits[start:len(limits):len(limits)]})
		case !it.claim:
			w.met.hit(ResultOK)
			answers = append(answers, answer{index: i, result: 1, limits: limits[start:len(limits):len(limits)]})
		default:
			j := &claimJob{
				t:       t,
				item:    i,
				id:      claims.ID{Tenant: string(it.tenant), Source: string(it.source), Key: string(it.key)},
				hookID:  string(it.hookID),
				pending: msToDuration(it.pendingMs, w.cfg.pendingTTL),
				timeout: min(msToDuration(it.timeoutMs, DefaultBudget), maxOwnerTimeout),
				refs:    append([]bucketRef(nil), refs...),
				lims:    append([]gcra.Limit(nil), lims...),
				limits:  append([]limitPair(nil), limits[start:]...),
			}
			limits = limits[:start]
			fs.claims = append(fs.claims, j)
		}
	}
	unlock()
	fs.limits = limits

	// Admit the claims (this may wait for KV slots: back-pressure); one
	// that is refused (the tenure ended meanwhile) is refunded and answered
	// not_owner now.
	var cb *claimBatch
	admitted := fs.claims[:0]
	for _, j := range fs.claims {
		if !j.t.admit() {
			j.t.refund(j.refs, j.lims)
			answers = append(answers, answer{index: j.item, status: stNotOwner, reason: reasonNotOwner})
			continue
		}
		admitted = append(admitted, j)
	}
	if len(admitted) > 0 {
		cb = &claimBatch{w: w, reply: m.Reply, answers: make([]answer, len(admitted)), left: len(admitted)}
	}
	// The immediate reply: every item decided here. When the frame's only
	// item waits on a claim there is nothing to say yet.
	if len(answers) > 0 || len(admitted) > 0 && len(items) > 1 {
		buf := appendReplyHeader(fs.buf[:0], cb != nil, w.route, len(answers))
		for k := range answers {
			buf = appendAnswer(buf, &answers[k])
		}
		fs.buf = buf
		_ = w.nc.Publish(m.Reply, buf)
	}
	fs.answers = answers[:0]
	for k, j := range admitted {
		j.batch, j.slot = cb, k
		cb.answers[k].index = j.item
		w.runners.run(j.run)
	}
}

// run takes the claim, refunds the charges unless it is ours, and records
// the answer; the last job of the frame sends the reply.
func (j *claimJob) run() {
	t, w := j.t, j.t.w
	defer t.finish()
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	res, err := w.store.Claim(ctx, j.id, j.hookID, j.pending)
	cancel()
	if err != nil || res.Outcome != claims.OK {
		t.refund(j.refs, j.lims)
	}
	a := &j.batch.answers[j.slot]
	switch {
	case errors.Is(err, claims.ErrInvalid):
		w.met.hit("invalid")
		a.status, a.reason = stInvalid, err.Error()
	case err != nil:
		w.met.hit("unavailable")
		a.status, a.reason = stUnavailable, "claims: "+err.Error()
	case res.Outcome == claims.OK:
		w.met.hit(ResultOK)
		a.result, a.hookID, a.revision, a.limits = 1, res.HookID, res.Revision, j.limits
	case res.Outcome == claims.Duplicate:
		w.met.hit(ResultDuplicate)
		a.result, a.hookID, a.revision = 2, res.HookID, res.Revision
	default:
		w.met.hit(ResultPending)
		a.result, a.hookID, a.revision, a.retryMs = 3, res.HookID, res.Revision, max(1, ceilMs(res.RetryAfter))
	}
	j.batch.done(j.slot)
}

// done reports slot's answer ready.
func (b *claimBatch) done(slot int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left--
	b.pending = append(b.pending, slot)
	switch {
	case b.left == 0:
		if b.timer != nil {
			b.timer.Stop()
		}
		b.sendLocked()
	case b.timer == nil:
		b.timer = time.AfterFunc(claimLinger, b.flush)
	}
}

func (b *claimBatch) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer = nil
	if len(b.pending) > 0 && b.left > 0 {
		b.sendLocked()
	}
}

// sendLocked publishes the pending answers (b.mu held).
func (b *claimBatch) sendLocked() {
	buf := appendReplyHeader(make([]byte, 0, 64+48*len(b.pending)), b.left > 0, b.w.route, len(b.pending))
	for _, k := range b.pending {
		buf = appendAnswer(buf, &b.answers[k])
	}
	b.pending = b.pending[:0]
	_ = b.w.nc.Publish(b.reply, buf)
}
