package quota

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
)

// The owner's decision core. Every hit an owner serves — an item of a batch
// frame (serveFrame) or a JSON request (tenure.hit) — is a wireHit that
// has passed wireHit.validate, is routed to the tenure of its partition,
// and is decided by tenure.decide: its charges all or nothing under the
// tenure's lock, then, for an admitted hit with a claim, a claimJob that
// writes the claim (claimJob.run) and turns its outcome into the answer
// (claimAnswer). What differs between the two paths is only how the answer
// travels: in a reply frame, or as a JSON HitReply.

// chargeScratch is reusable space for deciding one hit's charges.
type chargeScratch struct {
	refs []bucketRef
	lims []gcra.Limit
	decs []gcra.Decision
}

// decide decides item it, the index-th of its request, at now (t.mu
// held). It returns the item's answer — rate_limited, or ok for a hit
// without a claim — or, when the charges were taken and the item carries a
// claim, the job that takes the claim (its answer comes with the claim).
// One bucket state per charge is appended to limits; an answer's limits
// alias it.
func (t *tenure) decide(it *wireHit, index int, now int64, sc *chargeScratch, limits []limitPair) (answer, *claimJob, []limitPair) {
	refs, lims, decs := sc.refs[:0], sc.lims[:0], sc.decs[:0]
	for _, c := range it.charges {
		refs = append(refs, t.state.ref(c.kind, it.tenant, true))
		lims = append(lims, gcra.Limit{Increment: c.inc, Capacity: c.cap})
		decs = append(decs, gcra.Decision{})
	}
	sc.refs, sc.lims, sc.decs = refs, lims, decs
	allowed, retry := t.charge(refs, lims, decs, now)
	start := len(limits)
	for k := range decs {
		limits = append(limits, limitOf(lims[k].Increment, decs[k], allowed))
	}
	own := limits[start:len(limits):len(limits)]
	switch {
	case !allowed:
		return answer{index: index, result: resRateLimited, retryMs: ceilMs(retry), limits: own}, nil, limits
	case !it.claim:
		return answer{index: index, result: resOK, limits: own}, nil, limits
	}
	w := t.w
	j := &claimJob{
		t:       t,
		item:    index,
		id:      claims.ID{Tenant: string(it.tenant), Source: string(it.source), Key: string(it.key)},
		hookID:  string(it.hookID),
		pending: msToDuration(it.pendingMs, w.cfg.pendingTTL),
		timeout: min(msToDuration(it.timeoutMs, DefaultBudget), maxOwnerTimeout),
		refs:    slices.Clone(refs),
		lims:    slices.Clone(lims),
		limits:  slices.Clone(own),
	}
	return answer{}, j, limits[:start]
}

// claimJob is one admitted hit whose charges are taken and whose claim is
// still to be written. Its answer goes to the item's slot of a frame's
// claimBatch, or (batch nil) as a JSON reply to msg.
type claimJob struct {
	t       *tenure
	item    int // index in the frame
	id      claims.ID
	hookID  string
	pending time.Duration
	timeout time.Duration
	refs    []bucketRef
	lims    []gcra.Limit
	limits  []limitPair

	batch *claimBatch
	slot  int       // index in batch.answers
	msg   *nats.Msg // batch nil: the JSON request
	kinds []Charge  // batch nil: the request's charges, for the reply's limits
}

// run takes the claim (the write in the fleet's claim store), refunds the
// charges unless the claim is ours, and delivers the answer. The tenure
// admitted the job (tenure.admit); run finishes it.
func (j *claimJob) run() {
	t, w := j.t, j.t.w
	defer t.finish()
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	res, err := w.store.Claim(ctx, j.id, j.hookID, j.pending)
	cancel()
	a, _ := claimAnswer(res, err, j.limits)
	if a.result != resOK {
		t.refund(j.refs, j.lims)
	}
	w.met.hit(a.metric())
	if j.batch == nil {
		respondAnswer(j.msg, &a, j.kinds)
		return
	}
	a.index = j.item
	j.batch.answers[j.slot] = a
	j.batch.done(j.slot)
}

// claimAnswer turns the outcome of taking a hit's claim (res, err) into the
// hit's answer: ok with the charges' limits when the claim is ours,
// duplicate or pending (retry after at least 1 ms) with the holder's hook
// id and revision, invalid when the store refused the claim, unavailable
// when it did not answer. Only an ok answer keeps the charges; the caller
// refunds them otherwise. failure is the answer as a Go error (wrapping
// ErrInvalid or ErrUnavailable, and err), nil for an answered hit.
func claimAnswer(res claims.Result, err error, limits []limitPair) (a answer, failure error) {
	switch {
	case errors.Is(err, claims.ErrInvalid):
		return answer{status: stInvalid, reason: err.Error()}, fmt.Errorf("%w: %w", ErrInvalid, err)
	case err != nil:
		return answer{status: stUnavailable, reason: "claims: " + err.Error()}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	case res.Outcome == claims.OK:
		return answer{result: resOK, hookID: res.HookID, revision: res.Revision, limits: limits}, nil
	case res.Outcome == claims.Duplicate:
		return answer{result: resDuplicate, hookID: res.HookID, revision: res.Revision}, nil
	default:
		return answer{result: resPending, hookID: res.HookID, revision: res.Revision, retryMs: max(1, ceilMs(res.RetryAfter))}, nil
	}
}

// metric is the answer's label of sluice_quota_hits_total.
func (a *answer) metric() string {
	switch a.status {
	case stAnswered:
		return resultCodes[a.result]
	case stInvalid:
		return "invalid"
	case stUnavailable:
		return "unavailable"
	}
	return reasonNotOwner
}

// hitReply is an answered item as a HitReply; charges name the limits.
func (a *answer) hitReply(charges []Charge) HitReply {
	rep := HitReply{Result: resultCodes[a.result], HookID: a.hookID, RetryAfterMs: a.retryMs, Revision: a.revision}
	if len(a.limits) > 0 {
		rep.Limits = make([]LimitState, len(a.limits))
		for i, l := range a.limits {
			rep.Limits[i] = LimitState{Kind: charges[i].Kind, Remaining: l.remaining, ResetAfterMs: l.resetMs}
		}
	}
	return rep
}

// respondAnswer answers a JSON hit: a HitReply, or the error headers.
func respondAnswer(m *nats.Msg, a *answer, charges []Charge) {
	switch a.status {
	case stAnswered:
		respondJSON(m, a.hitReply(charges))
	case stInvalid:
		respondError(m, 400, a.reason)
	default:
		respondError(m, 503, a.reason)
	}
}

// hitItem is r, routed to partition n with timeoutMs left of the caller's
// budget, as the item the decision core reads (allocating: JSON hits are
// the owner's slow path).
func hitItem(r *HitRequest, n int, timeoutMs int64) wireHit {
	it := wireHit{op: opItemHit, n: n, timeoutMs: timeoutMs, tenant: []byte(r.Tenant())}
	it.charges = make([]wireCharge, len(r.Charges))
	for i, c := range r.Charges {
		it.charges[i] = wireCharge{kind: []byte(c.Kind), inc: c.IncrementUs, cap: c.CapacityUs}
	}
	if c := r.Claim; c != nil {
		it.claim = true
		it.source, it.key, it.hookID = []byte(c.Source), []byte(c.Key), []byte(c.HookID)
		it.ttlMs, it.pendingMs = c.TTLMs, c.PendingTTLMs
	}
	return it
}
