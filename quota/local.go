package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// The local owner: a Client made WithLocalOwner(w) hands a hit for a
// partition that w serves right now to w in process — no frame encode, no
// NATS hop, no runner handoff (the caller's goroutine writes the claim; it
// would wait for the answer anyway). Everything else is the owner's path
// of a frame item: routeItem (validation, misroute check, the serving
// tenure, fencing by Lease.Valid), tenure.decide under the tenure's lock,
// tenure.admit (the KV semaphore: back-pressure), claimJob.write and
// claimJob.answer (claimAnswer, the refund). A hit the worker does not
// serve — not its partition, a tenure that ended, a lease no longer valid,
// a claim refused admission — is not answered here: it takes the NATS path
// (the partition subject, its not_owner retries and its deadline), so a
// lost lease is seen exactly as a remote caller sees it.

// hitLocal decides r (valid, of partition n) in process when w serves n:
// ok false means w did not take it (nothing was spent) and the caller
// takes the NATS path. The owner's timeout is ctx's deadline, else budget.
func (w *Worker) hitLocal(ctx context.Context, r *HitRequest, n int, budget time.Duration) (a frame.Answer, ok bool) {
	if t := w.served[n].Load(); t == nil || !t.serving() {
		return frame.Answer{}, false // the common case on a multi-node fleet: no item built
	}
	timeout := budget
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return frame.Answer{}, false // the NATS path answers a spent deadline
	}
	it := hitItem(r, n, max(1, timeout.Milliseconds()))
	t, a, ok := w.routeItem(&it, 0)
	if !ok {
		return a, a.Status != frame.StatusNotOwner
	}
	var sc chargeScratch
	now := gcra.Micros(w.cfg.now())
	t.mu.Lock()
	a, j, _ := t.decide(&it, 0, now, &sc, nil)
	t.mu.Unlock()
	if j == nil {
		w.met.hit(answerMetric(&a))
		return a, true
	}
	if !t.admit() {
		t.refund(j.refs, j.lims) // as admitClaims: nothing spent, not_owner
		return frame.Answer{}, false
	}
	defer t.finish()
	return j.answer(j.write()), true
}

// localHit is Client.Hit's in-process call (see hitLocal): done false
// means the hit takes the NATS path.
func (c *Client) localHit(ctx context.Context, r *HitRequest, n int) (rep HitReply, done bool, err error) {
	a, ok := c.local.hitLocal(ctx, r, n, c.budget)
	if !ok {
		return HitReply{}, false, nil
	}
	switch a.Status {
	case frame.StatusAnswered:
		return answerReply(&a, r.Charges), true, nil
	case frame.StatusInvalid:
		return HitReply{}, true, fmt.Errorf("%w: %s", ErrInvalid, a.Reason)
	default: // frame.StatusUnavailable: the claim store failed
		return HitReply{}, true, fmt.Errorf("%w: %s: %s", ErrUnavailable, c.subjects[n], a.Reason)
	}
}
