package quota

import (
	"errors"
	"fmt"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/internal/timeconv"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// ClaimAnswer turns the outcome of taking a hit's claim (res, err) into the
// hit's answer, for the owner and the Fleet's fallback alike: ok with the
// charges' limits, duplicate or pending (retry after >= 1 ms) with the
// holder's hook id and revision, invalid or unavailable. Only ok keeps the
// charges (the caller refunds otherwise). failure is the answer as a Go
// error, nil for an answered hit.
func ClaimAnswer(res claims.Result, err error, limits []frame.Limit) (a frame.Answer, failure error) {
	switch {
	case errors.Is(err, protocol.ErrInvalid):
		return frame.Answer{Status: frame.StatusInvalid, Reason: err.Error()}, fmt.Errorf("%w: %w", protocol.ErrInvalid, err)
	case err != nil:
		return frame.Answer{Status: frame.StatusUnavailable, Reason: "claims: " + err.Error()}, fmt.Errorf("%w: %w", errUnavailable, err)
	case res.Outcome == claims.OK:
		return frame.Answer{Result: frame.ResultOK, HookID: res.HookID, Revision: res.Revision, Limits: limits}, nil
	case res.Outcome == claims.Duplicate:
		return frame.Answer{Result: frame.ResultDuplicate, HookID: res.HookID, Revision: res.Revision}, nil
	default:
		return frame.Answer{Result: frame.ResultPending, HookID: res.HookID, Revision: res.Revision, RetryMs: max(1, timeconv.CeilMs(res.RetryAfter))}, nil
	}
}

// AnswerReply is an answered item as a HitReply; charges name the limits.
func AnswerReply(a *frame.Answer, charges []protocol.Charge) protocol.HitReply {
	rep := protocol.HitReply{Result: resultCodes[a.Result], HookID: a.HookID, RetryAfterMs: a.RetryMs, Revision: a.Revision}
	if len(a.Limits) > 0 {
		rep.Limits = make([]protocol.LimitState, len(a.Limits))
		for i, l := range a.Limits {
			rep.Limits[i] = protocol.LimitState{Kind: charges[i].Kind, Remaining: l.Remaining, ResetAfterMs: l.ResetMs}
		}
	}
	return rep
}
