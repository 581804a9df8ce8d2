package owner

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/internal/timeconv"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// The owner's decision core. Every hit an owner serves (a batch frame item
// or a JSON request, as a frame.Item that passed quota.ValidateItem) is
// routed to its partition's tenure and decided by tenure.decide: its charges
// all or nothing under the tenure's lock, then for an admitted hit with a
// claim a claimJob that writes the claim and completes with its outcome.
// Only how the answer travels differs: a reply frame or a JSON HitReply.

// chargeScratch is reusable space for deciding one hit's charges.
type chargeScratch struct {
	refs []bucketRef
	lims []gcra.Limit
	decs []gcra.Decision
}

// decide decides item it, the index-th of its request, at now (t.mu
// held): its answer, or, when the charges were taken and it carries a
// claim, the job that takes the claim. One bucket state per charge is
// appended to limits; an answer's limits alias it.
func (t *tenure) decide(it *frame.Item, index int, now int64, sc *chargeScratch, limits []frame.Limit) (frame.Answer, *claimJob, []frame.Limit) {
	refs, lims, decs := sc.refs[:0], sc.lims[:0], sc.decs[:0]
	for _, c := range it.Charges {
		refs = append(refs, t.state.ref(c.Kind, it.Tenant, true))
		lims = append(lims, gcra.Limit{Increment: c.Inc, Capacity: c.Cap})
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
		return frame.Answer{Index: index, Result: frame.ResultRateLimited, RetryMs: timeconv.CeilMs(retry), Limits: own}, nil, limits
	case !it.Claim:
		return frame.Answer{Index: index, Result: frame.ResultOK, Limits: own}, nil, limits
	}
	w := t.w
	j := &claimJob{
		t:       t,
		item:    index,
		pending: quota.DurationMs(it.PendingMs, w.cfg.PendingTTL),
		timeout: min(quota.DurationMs(it.TimeoutMs, protocol.DefaultTimeout), maxOwnerTimeout),
	}
	j.id, j.hookID = claimStrings(it)
	// A hit's few charges (the edge's two) stay inside the job.
	j.refs = append(j.inRefs[:0:len(j.inRefs)], refs...)
	j.lims = append(j.inLims[:0:len(j.inLims)], lims...)
	j.limits = append(j.inLimits[:0:len(j.inLimits)], own...)
	return frame.Answer{}, j, limits[:start]
}

// claimStrings copies an item's claim out of its frame in one allocation:
// the four strings share it.
func claimStrings(it *frame.Item) (claims.ID, string) {
	var b strings.Builder
	b.Grow(len(it.Tenant) + len(it.Source) + len(it.Key) + len(it.HookID))
	b.Write(it.Tenant)
	b.Write(it.Source)
	b.Write(it.Key)
	b.Write(it.HookID)
	all := b.String()
	s, k, h := len(it.Tenant), len(it.Tenant)+len(it.Source), len(it.Tenant)+len(it.Source)+len(it.Key)
	return claims.ID{Tenant: all[:s], Source: all[s:k], Key: all[k:h]}, all[h:]
}

// inlineCharges: a claim job keeps the state of this many charges inside
// itself (the edge charges hooks and bytes); more take an allocation.
const inlineCharges = 2

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
	limits  []frame.Limit
	// room for refs, lims and limits of a hit with up to inlineCharges
	inRefs   [inlineCharges]bucketRef
	inLims   [inlineCharges]gcra.Limit
	inLimits [inlineCharges]frame.Limit

	batch *claimBatch
	slot  int               // index in batch.answers
	msg   *nats.Msg         // batch nil: the JSON request
	kinds []protocol.Charge // batch nil: the request's charges, for the reply's limits
}

// run writes the claim and completes the job with the outcome. The two
// steps are apart so that another writer (a pipeline of claim writes) can
// take the write and call complete itself.
func (j *claimJob) run() {
	j.complete(j.write())
}

// write takes the claim: one create in the fleet's claim store, bounded by
// the item's timeout.
func (j *claimJob) write() (claims.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), j.timeout)
	defer cancel()
	return j.t.w.store.Claim(ctx, j.id, j.hookID, j.pending)
}

// complete turns the claim's outcome into the item's answer, refunds the
// charges unless the claim is ours, and delivers the answer. The tenure
// admitted the job (tenure.admit); complete finishes it.
func (j *claimJob) complete(res claims.Result, err error) {
	defer j.t.finish()
	a := j.answer(res, err)
	if j.batch == nil {
		respondAnswer(j.msg, &a, j.kinds)
		return
	}
	if err == nil && res.Outcome == claims.OK {
		j.t.w.grants.put(j.id, j.hookID, res.Revision) // for its settle (settle.go)
	}
	a.Index = j.item
	j.batch.answers[j.slot] = a
	j.batch.done(j.slot)
}

// answer is the job's answer to the claim's outcome (quota.ClaimAnswer); it
// refunds the charges unless the claim is ours and counts the answer.
func (j *claimJob) answer(res claims.Result, err error) frame.Answer {
	a, _ := quota.ClaimAnswer(res, err, j.limits)
	if a.Result != frame.ResultOK {
		j.t.refund(j.refs, j.lims)
	}
	j.t.w.met.hit(answerMetric(&a))
	return a
}

// answerMetric is the answer's label of sluice_quota_hits_total.
func answerMetric(a *frame.Answer) string {
	switch a.Status {
	case frame.StatusAnswered:
		return quota.ResultName(a.Result)
	case frame.StatusInvalid:
		return "invalid"
	case frame.StatusUnavailable:
		return "unavailable"
	}
	return protocol.NotOwner.Code
}

// respondAnswer answers a JSON hit: a protocol.HitReply, or the error headers.
func respondAnswer(m *nats.Msg, a *frame.Answer, charges []protocol.Charge) {
	switch a.Status {
	case frame.StatusAnswered:
		respondJSON(m, quota.AnswerReply(a, charges))
	case frame.StatusInvalid:
		respondError(m, 400, a.Reason)
	default:
		respondError(m, 503, a.Reason)
	}
}
