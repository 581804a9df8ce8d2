package service

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/internal/timeconv"
	"github.com/sluice-dev/sluice/protocol"
)

// MaxNameBytes bounds every name of a request that has no tighter bound of
// its own: a hit's tenants, a reset's tenant, a counter's principal and
// key (the quota owner's bound, protocol.MaxNameBytes).
const MaxNameBytes = protocol.MaxNameBytes

// endpoints builds the endpoints of the dependencies cfg provides, in the
// order of PROTOCOL.md.
func (s *Service) endpoints() []*endpoint {
	st, settle := s.cfg.StoreTimeout, s.cfg.SettleTimeout
	var eps []*endpoint
	add := func(e string, timeout time.Duration, h func(context.Context, []byte) (any, error)) {
		eps = append(eps, &endpoint{name: protocol.EndpointName(e), subject: protocol.Subject(s.cfg.Prefix, e), timeout: timeout, handle: h})
	}
	if s.cfg.Quota != nil {
		add(protocol.QuotaHit, st, s.quotaHit)
		add(protocol.QuotaReset, st, s.quotaReset)
		add(protocol.QuotaReserve, st, s.quotaReserve)
		add(protocol.QuotaRelease, st, s.quotaRelease)
		add(protocol.QuotaCount, st, s.quotaCount)
	}
	if s.cfg.Quota != nil {
		add(protocol.ClaimsSettle, settle, s.claimsSettle)
	}
	if s.cfg.Claims != nil {
		add(protocol.ClaimsRelease, settle, s.claimsRelease)
		add(protocol.ClaimsGet, st, s.claimsGet)
	}
	if s.cfg.Replay != nil {
		add(protocol.ReplayClaim, st, s.replayClaim)
	}
	if s.cfg.Cooldown != nil {
		add(protocol.CooldownRecord, st, s.cooldownRecord)
		add(protocol.CooldownPenalize, st, s.cooldownPenalize)
		add(protocol.CooldownLoad, st, s.cooldownLoad)
	}
	return append(eps, scoped(s.cfg.Prefix, eps)...)
}

// okResult is {"ok":true}.
var okResult = protocol.OKReply{OK: true}

// ---- quota.* ----

// quotaHit serves quota.hit:
// {"charges":[{"kind","tenant","increment_us","capacity_us"}],"claim":null|{…}}.
func (s *Service) quotaHit(ctx context.Context, data []byte) (any, error) {
	req, err := decodeHit(data)
	if err != nil {
		return nil, err
	}
	rep, err := s.cfg.Quota.Hit(ctx, req)
	if err != nil {
		return nil, err
	}
	if rep.Result == protocol.ResultRateLimited && s.cfg.Events != nil {
		source := ""
		if req.Claim != nil {
			source = req.Claim.Source
		}
		s.cfg.Events.HitDenied(&req, &rep, source)
	}
	return rep, nil
}

// quotaReset serves quota.reset: {"tenant"} -> {"ok":true}.
func (s *Service) quotaReset(ctx context.Context, data []byte) (any, error) {
	return handle(data, (*protocol.ResetRequest).Validate, func(req *protocol.ResetRequest) (any, error) {
		return okOr(s.cfg.Quota.Reset(ctx, req.Tenant))
	})
}

// quotaReserve serves quota.reserve: {"principal","key","max","ttl_ms"?}
// -> {"granted","count"}.
func (s *Service) quotaReserve(ctx context.Context, data []byte) (any, error) {
	return handle(data, (*protocol.ReserveRequest).Validate, func(req *protocol.ReserveRequest) (any, error) {
		return replyOr(s.cfg.Quota.Reserve(ctx, *req))
	})
}

// quotaRelease serves quota.release: {"principal","key"} -> {"count"}.
func (s *Service) quotaRelease(ctx context.Context, data []byte) (any, error) {
	return handle(data, (*protocol.CounterRequest).Validate, func(req *protocol.CounterRequest) (any, error) {
		return replyOr(s.cfg.Quota.Release(ctx, *req))
	})
}

// quotaCount serves quota.count: {"principal","key"} -> {"count"}.
func (s *Service) quotaCount(ctx context.Context, data []byte) (any, error) {
	return handle(data, (*protocol.CounterRequest).Validate, func(req *protocol.CounterRequest) (any, error) {
		return replyOr(s.cfg.Quota.Count(ctx, *req))
	})
}

// ---- claims.* ----

// claimID is the claim a claims.settle, claims.release or claims.get
// body (protocol.ClaimsRequest) names.
func claimID(r *protocol.ClaimsRequest) claims.ID {
	return claims.ID{Tenant: r.Tenant, Source: r.Source, Key: r.Key}
}

// checkClaimID checks a claims.get request: a claim id.
func checkClaimID(r *protocol.ClaimsRequest) error { return claimID(r).Validate() }

// checkHeld checks a settle or release request: a claim id, a hook id and
// a revision >= 1.
func checkHeld(r *protocol.ClaimsRequest) error {
	if err := checkClaimID(r); err != nil {
		return err
	}
	if err := protocol.ValidateHookID(r.HookID); err != nil {
		return err
	}
	if r.Revision == 0 {
		return invalid("revision must be >= 1")
	}
	return nil
}

// decodeHeld decodes (decodeClaim: the Go client's bytes on a fast path)
// and checks a settle or release request.
func decodeHeld(data []byte) (protocol.ClaimsRequest, error) {
	var req protocol.ClaimsRequest
	if err := decodeClaim(data, &req); err != nil {
		return req, err
	}
	return req, checkHeld(&req)
}

// claimsSettle serves claims.settle:
// {"tenant","source","key","hook_id","revision","ttl_ms"?} -> {"ok":true},
// or 409 claim_lost.
func (s *Service) claimsSettle(ctx context.Context, data []byte) (any, error) {
	req, err := decodeHeld(data)
	if err != nil {
		return nil, err
	}
	if req.TTLMs < 0 {
		return nil, invalid("ttl_ms must be >= 0, got %d", req.TTLMs)
	}
	// The one settle path: the tenant's partition owner commits it and
	// answers once it is durable (quota.Router.Settle).
	if err := s.cfg.Quota.Settle(ctx, protocol.SettleRequest(req)); err != nil {
		return nil, err
	}
	return okResult, nil
}

// claimsRelease serves claims.release:
// {"tenant","source","key","hook_id","revision"} -> {"ok":true}, or 409
// claim_lost.
func (s *Service) claimsRelease(ctx context.Context, data []byte) (any, error) {
	req, err := decodeHeld(data)
	if err != nil {
		return nil, err
	}
	return okOr(s.cfg.Claims.Release(ctx, claimID(&req), req.HookID, req.Revision))
}

// claimsGet serves claims.get: {"tenant","source","key"} ->
// {"state","hook_id","revision","expires_in_ms"}; state "absent" has
// hook_id "" and zeros.
func (s *Service) claimsGet(ctx context.Context, data []byte) (any, error) {
	return handle(data, checkClaimID, func(req *protocol.ClaimsRequest) (any, error) {
		st, err := s.cfg.Claims.Get(ctx, claimID(req))
		if err != nil {
			return nil, err
		}
		return protocol.ClaimState{State: st.State, HookID: st.HookID, Revision: st.Revision, ExpiresInMs: timeconv.CeilMs(st.ExpiresIn)}, nil
	})
}

// ---- replay.claim ----

// decodeReplay decodes and checks a replay.claim body. retain_until is
// required: 0 is a valid instant, so absent (or null) is not 0.
func decodeReplay(data []byte) (protocol.ReplayRequest, error) {
	var req protocol.ReplayRequest
	if err := decodeStrict(data, &req); err != nil {
		return req, err
	}
	if !hasMember(data, "retain_until") {
		return req, invalid("retain_until is required")
	}
	return req, protocol.ValidateReplay(req.Namespace, req.Key, req.RetainUntil)
}

// replayClaim serves replay.claim: {"namespace","key","retain_until"} ->
// {"result":"claimed"|"already_claimed"|"full"}.
func (s *Service) replayClaim(ctx context.Context, data []byte) (any, error) {
	req, err := decodeReplay(data)
	if err != nil {
		return nil, err
	}
	out, err := s.cfg.Replay.Claim(ctx, req.Namespace, req.Key, req.RetainUntil)
	if err != nil {
		return nil, err
	}
	switch out {
	case protocol.Claimed:
		// A granted nonce must outlive a power cut, or its replay passes.
		if err := durability.ForScope(durability.SyncWith(ctx, s.cfg.Sync), durability.SyncScope{Replay: true}); err != nil {
			return nil, err
		}
		return protocol.ReplayReply{Result: out.String()}, nil
	case protocol.AlreadyClaimed, protocol.Full:
		return protocol.ReplayReply{Result: out.String()}, nil
	}
	return nil, fmt.Errorf("service: replay store returned %v", out)
}

// ---- cooldown.* ----

// recordRequest is the body of cooldown.record. ObservedAtMs is required
// (0 is a valid instant), hence a pointer.
type recordRequest struct {
	Account      string              `json:"account"`
	Backend      string              `json:"backend"`
	ObservedAtMs *int64              `json:"observed_at_ms"`
	Snapshots    []protocol.Snapshot `json:"snapshots"`
}

// cooldownRecord serves cooldown.record:
// {"account","backend","observed_at_ms","snapshots":[…]} -> {"ok":true}.
func (s *Service) cooldownRecord(ctx context.Context, data []byte) (any, error) {
	return handle(data, (*recordRequest).check, func(req *recordRequest) (any, error) {
		return okOr(s.cfg.Cooldown.Record(ctx, req.reading()))
	})
}

func (r *recordRequest) reading() protocol.Reading {
	return protocol.Reading{Account: r.Account, Backend: r.Backend, ObservedAtMs: *r.ObservedAtMs, Snapshots: r.Snapshots}
}

func (r *recordRequest) check() error {
	if r.ObservedAtMs == nil {
		return invalid("observed_at_ms is required")
	}
	reading := r.reading()
	return reading.Validate()
}

// cooldownPenalize serves cooldown.penalize:
// {"account","backend","until_ms":N|null} -> {"ok":true}; null or absent
// until_ms clears the penalty.
func (s *Service) cooldownPenalize(ctx context.Context, data []byte) (any, error) {
	return handle(data, (*protocol.PenalizeRequest).Validate, func(req *protocol.PenalizeRequest) (any, error) {
		return okOr(s.cfg.Cooldown.Penalize(ctx, req.Account, req.Backend, req.UntilMs))
	})
}

// cooldownLoad serves cooldown.load: {"account","backends":[…]} ->
// {"backends":[{"backend","last_checked_ms","snapshots","penalty_until_ms"}]},
// one entry per requested backend, in order.
func (s *Service) cooldownLoad(ctx context.Context, data []byte) (any, error) {
	return handle(data, (*protocol.LoadRequest).Validate, func(req *protocol.LoadRequest) (any, error) {
		entries, err := s.cfg.Cooldown.Load(ctx, req.Account, req.Backends)
		if err != nil {
			return nil, err
		}
		if len(entries) != len(req.Backends) {
			return nil, fmt.Errorf("service: cooldown load returned %d entries for %d backends", len(entries), len(req.Backends))
		}
		return protocol.LoadReply{Backends: entries}, nil
	})
}
