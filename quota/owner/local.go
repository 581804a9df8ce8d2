package owner

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// The local owner: a quota.Router made quota.WithLocalOwner(w) hands a hit
// for a partition that w serves right now to w in process: no frame, no
// NATS hop, no runner handoff (the caller's goroutine writes the claim).
// The rest is a frame item's path (routeItem, tenure.decide, tenure.admit,
// claimJob). A hit w does not serve (another partition, an ended tenure,
// an invalid lease, a claim refused admission) takes the NATS path, so a
// lost lease is seen exactly as a remote caller sees it.

// HitLocal decides r (valid, of partition n) in process when w serves n:
// done false means w did not take it (nothing was spent). The owner's
// timeout is ctx's deadline, else budget.
func (w *Worker) HitLocal(ctx context.Context, r *protocol.HitRequest, n int, budget time.Duration) (rep protocol.HitReply, done bool, err error) {
	a, ok := w.hitLocal(ctx, r, n, budget)
	if !ok {
		return protocol.HitReply{}, false, nil
	}
	switch a.Status {
	case frame.StatusAnswered:
		return quota.AnswerReply(&a, r.Charges), true, nil
	case frame.StatusInvalid:
		return protocol.HitReply{}, true, fmt.Errorf("%w: %s", protocol.ErrInvalid, a.Reason)
	default: // frame.StatusUnavailable: the claim store failed
		return protocol.HitReply{}, true, fmt.Errorf("quota: %w: %s: %s", protocol.ErrUnavailable, quota.PartitionSubject(w.cfg.Prefix, n), a.Reason)
	}
}

// Routing is the worker's subject prefix and partition count
// (quota.LocalOwner: a Router made WithLocalOwner must route alike).
func (w *Worker) Routing() (prefix string, partitions int) {
	return w.cfg.Prefix, w.cfg.Partitions
}

// hitLocal is HitLocal's decision: the item's answer, ok false when w
// does not take the hit.
func (w *Worker) hitLocal(ctx context.Context, r *protocol.HitRequest, n int, budget time.Duration) (a frame.Answer, ok bool) {
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
	now := gcra.Micros(w.cfg.Now())
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
	res, err := j.write()
	if err == nil && res.Outcome == claims.OK {
		w.grants.put(j.id, j.hookID, res.Revision) // for its settle (settle.go)
	}
	return j.answer(res, err), true
}

// SettleLocal commits r (valid, of partition n) in process when w serves
// n: a settle item's path without the frame (HitLocal's routing and
// fencing, settleJob.commit, the sync). done false means w did not take it.
// The owner's timeout is ctx's deadline, else budget. Errors:
// protocol.ErrClaimLost, protocol.ErrInvalid, protocol.ErrUnavailable.
func (w *Worker) SettleLocal(ctx context.Context, r *protocol.SettleRequest, n int, budget time.Duration) (done bool, err error) {
	if t := w.served[n].Load(); t == nil || !t.serving() {
		return false, nil
	}
	timeout := budget
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return false, nil
	}
	it := frame.Item{Op: frame.OpSettle, N: n, TimeoutMs: max(1, timeout.Milliseconds()), Tenant: []byte(r.Tenant),
		Source: []byte(r.Source), Key: []byte(r.Key), HookID: []byte(r.HookID), TTLMs: r.TTLMs, Revision: r.Revision}
	t, a, ok := w.routeItem(&it, 0)
	if !ok {
		if a.Status == frame.StatusNotOwner {
			return false, nil
		}
		return true, fmt.Errorf("%w: %s", protocol.ErrInvalid, a.Reason)
	}
	if !t.admit() {
		w.met.settle(frame.StatusNotOwner)
		return false, nil
	}
	defer t.finish()
	j := t.newSettleJob(&it, 0)
	j.granted = w.grants.take(j.id, j.hookID, j.rev)
	ctx, cancel := context.WithTimeout(ctx, j.timeout) // the owner's bound, as run's
	defer cancel()
	err = j.commit(ctx)
	a = settleAnswer(err)
	w.met.settle(a.Status)
	switch a.Status {
	case frame.StatusAnswered:
		return true, nil
	case frame.StatusLost:
		return true, err
	case frame.StatusInvalid:
		return true, fmt.Errorf("%w: %s", protocol.ErrInvalid, a.Reason)
	}
	return true, fmt.Errorf("quota: %w: %s: %s", protocol.ErrUnavailable, quota.PartitionSubject(w.cfg.Prefix, n), a.Reason)
}

// hitItem is r, routed to partition n with timeoutMs left of the caller's
// budget, as the item the owner's decision core reads (allocating: JSON
// hits are the owner's slow path).
func hitItem(r *protocol.HitRequest, n int, timeoutMs int64) frame.Item {
	it := frame.Item{Op: frame.OpHit, N: n, TimeoutMs: timeoutMs, Tenant: []byte(r.Tenant())}
	it.Charges = make([]frame.Charge, len(r.Charges))
	for i, c := range r.Charges {
		it.Charges[i] = frame.Charge{Kind: []byte(c.Kind), Inc: c.IncrementUs, Cap: c.CapacityUs}
	}
	if c := r.Claim; c != nil {
		it.Claim = true
		it.Source, it.Key, it.HookID = []byte(c.Source), []byte(c.Key), []byte(c.HookID)
		it.TTLMs, it.PendingMs = c.TTLMs, c.PendingTTLMs
	}
	return it
}
