package quota

import (
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/coalesce"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// The Router's side of coalescing (quota/internal/coalesce sends the
// frames): which hits go in a frame, how one is written, and its answer as
// a HitReply.

// coalesced is a HitRequest as a coalesce.Item.
type coalesced struct{ r *protocol.HitRequest }

func (c coalesced) AppendItem(b []byte, n int, timeoutMs int64) []byte {
	return appendHitItem(b, n, timeoutMs, c.r)
}

// settleItem is a SettleRequest as a coalesce.SettleItem.
type settleItem struct{ r *protocol.SettleRequest }

func (c settleItem) AppendItem(b []byte, n int, timeoutMs int64) []byte {
	return appendSettleItem(b, n, timeoutMs, c.r)
}

// frameable reports whether r is small enough for a frame.
func frameable(r *protocol.HitRequest) bool {
	n := 0
	for i := range r.Charges {
		n += len(r.Charges[i].Kind) + len(r.Charges[i].Tenant)
	}
	if c := r.Claim; c != nil {
		n += len(c.Tenant) + len(c.Source) + len(c.Key) + len(c.HookID)
	}
	return n <= coalesce.MaxItemBytes
}

// decodeHitReply builds the HitReply of an answered item.
func decodeHitReply(a *coalesce.Answer, r *protocol.HitRequest) protocol.HitReply {
	if a.Status != frame.StatusAnswered {
		return protocol.HitReply{}
	}
	rep := protocol.HitReply{
		Result:       resultCodes[a.Result],
		RetryAfterMs: a.RetryMs,
		Revision:     a.Revision,
	}
	rep.HookID = a.HookID
	if a.NLimits > 0 {
		rep.Limits = make([]protocol.LimitState, a.NLimits)
		for i := range a.NLimits {
			l := a.Limits[i]
			rep.Limits[i] = protocol.LimitState{Remaining: l.Remaining, ResetAfterMs: l.ResetMs}
			if i < len(r.Charges) {
				rep.Limits[i].Kind = r.Charges[i].Kind
			}
		}
	}
	return rep
}
