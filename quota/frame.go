package quota

import (
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// The quota side of the batch frame (quota/internal/frame is the codec):
// a decoded item as a HitRequest and checked by HitRequest.Validate's
// rules, a HitRequest written as an item, and the names of result codes.

// resultCodes names the result codes of a reply frame (0: none).
var resultCodes = [...]string{
	frame.ResultOK:          ResultOK,
	frame.ResultDuplicate:   ResultDuplicate,
	frame.ResultPending:     ResultPending,
	frame.ResultRateLimited: ResultRateLimited,
}

// appendHitItem appends r (validated: one tenant) as a hit item of
// partition n with timeoutMs left of its deadline.
func appendHitItem(b []byte, n int, timeoutMs int64, r *HitRequest) []byte {
	b = frame.AppendHitHead(b, n, timeoutMs, r.Tenant(), len(r.Charges))
	for i := range r.Charges {
		c := &r.Charges[i]
		b = frame.AppendCharge(b, c.Kind, c.IncrementUs, c.CapacityUs)
	}
	if c := r.Claim; c != nil {
		return frame.AppendClaim(b, c.Source, c.Key, c.HookID, c.TTLMs, c.PendingTTLMs)
	}
	return frame.AppendNoClaim(b)
}

// itemRequest rebuilds the HitRequest of a decoded item (allocating).
func itemRequest(it *frame.Item) HitRequest {
	tenant := string(it.Tenant)
	r := HitRequest{}
	if len(it.Charges) > 0 {
		r.Charges = make([]Charge, len(it.Charges))
		for i, c := range it.Charges {
			r.Charges[i] = Charge{Kind: internKind(c.Kind), Tenant: tenant, IncrementUs: c.Inc, CapacityUs: c.Cap}
		}
	}
	if it.Claim {
		r.Claim = &ClaimRequest{
			Tenant: tenant, Source: string(it.Source), Key: string(it.Key), HookID: string(it.HookID),
			TTLMs: it.TTLMs, PendingTTLMs: it.PendingMs,
		}
	}
	return r
}

// validateItem checks a decoded item with HitRequest.Validate's rules, in
// place (a frame's item is never rebuilt as a HitRequest to be checked).
func validateItem(it *frame.Item) error {
	if err := validateCharges(itemCharges{it}, it.Tenant, it.Claim); err != nil {
		return err
	}
	if it.Claim {
		return validateClaim(it.Tenant, it.Source, it.Key, it.HookID, it.TTLMs, it.PendingMs)
	}
	return nil
}

// itemCharges is the chargeList of a decoded item: every charge is for the
// item's tenant.
type itemCharges struct{ it *frame.Item }

func (f itemCharges) len() int { return len(f.it.Charges) }

func (f itemCharges) at(i int) (kind, tenant []byte, inc, capacity int64) {
	c := &f.it.Charges[i]
	return c.Kind, f.it.Tenant, c.Inc, c.Cap
}

// hitItem is r, routed to partition n with timeoutMs left of the caller's
// budget, as the item the owner's decision core reads (allocating: JSON
// hits are the owner's slow path).
func hitItem(r *HitRequest, n int, timeoutMs int64) frame.Item {
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
