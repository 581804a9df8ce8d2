package events

import (
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// DeniedKind is the charge kind that denied a rate-limited hit: the first
// limit the reply reports with nothing remaining (the owner reports every
// charge's bucket), else the kind of the hit's only charge, else "" (a
// node-local fallback decision over several charges does not say which
// denied; the event then carries no kind).
func DeniedKind(req *protocol.HitRequest, rep *protocol.HitReply) string {
	for _, l := range rep.Limits {
		if l.Remaining == 0 && l.Kind != "" {
			return l.Kind
		}
	}
	if len(req.Charges) == 1 {
		return req.Charges[0].Kind
	}
	return ""
}

// HitDenied publishes limit.denied.<tenant> for a hit answered
// rate_limited: the kind that denied it (DeniedKind) and the reply's
// retry-after. Whoever decides the denial calls it once: the HTTP edge
// for the hooks it admits, the micro service for sluice.v1.quota.hit.
// It does nothing for other results. source may be empty.
func (p *Publisher) HitDenied(req *protocol.HitRequest, rep *protocol.HitReply, source string) {
	if p == nil || rep.Result != protocol.ResultRateLimited {
		return
	}
	p.LimitDenied(req.Tenant(), source, DeniedKind(req, rep), time.Duration(rep.RetryAfterMs)*time.Millisecond)
}
