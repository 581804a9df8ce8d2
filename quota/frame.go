package quota

import (
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// The quota side of the batch frame (quota/internal/frame is the codec):
// a decoded item checked by HitRequest.Validate's rules, a HitRequest
// written as an item, and the names of result codes.

// ResultName is the name (ResultOK …) of a reply frame's result code.
func ResultName(code frame.Result) string { return resultCodes[code] }

// resultCodes names the result codes of a reply frame (0: none).
var resultCodes = [...]string{
	frame.ResultOK:          protocol.ResultOK,
	frame.ResultDuplicate:   protocol.ResultDuplicate,
	frame.ResultPending:     protocol.ResultPending,
	frame.ResultRateLimited: protocol.ResultRateLimited,
}

// appendHitItem appends r (validated: one tenant) as a hit item of
// partition n with timeoutMs left of its deadline.
func appendHitItem(b []byte, n int, timeoutMs int64, r *protocol.HitRequest) []byte {
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

// appendSettleItem appends r (validated) as a settle item of partition n
// with timeoutMs left of its deadline.
func appendSettleItem(b []byte, n int, timeoutMs int64, r *protocol.SettleRequest) []byte {
	return frame.AppendSettle(b, n, timeoutMs, r.Tenant, r.Source, r.Key, r.HookID, r.Revision, r.TTLMs)
}

// ValidateItem checks a decoded item with HitRequest.Validate's rules (a
// settle item with SettleRequest.Validate's), in place (a frame's item is
// never rebuilt as a request to be checked): the owner's check of every
// item it decides.
func ValidateItem(it *frame.Item) error {
	if it.Op == frame.OpSettle {
		return protocol.ValidateSettle(it.Tenant, it.Source, it.Key, it.HookID, it.Revision, it.TTLMs)
	}
	if err := protocol.ValidateCharges(itemCharges{it}, it.Tenant, it.Claim); err != nil {
		return err
	}
	if it.Claim {
		return protocol.ValidateClaim(it.Tenant, it.Source, it.Key, it.HookID, it.TTLMs, it.PendingMs)
	}
	return nil
}

// itemCharges is the protocol.ChargeList of a decoded item: every charge
// is for the item's tenant.
type itemCharges struct{ it *frame.Item }

func (f itemCharges) Len() int { return len(f.it.Charges) }

func (f itemCharges) At(i int) (kind, tenant []byte, inc, capacity int64) {
	c := &f.it.Charges[i]
	return c.Kind, f.it.Tenant, c.Inc, c.Cap
}
