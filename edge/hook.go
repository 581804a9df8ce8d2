package edge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/quota"
)

// Bounds of a webhook request besides its source's max_body_bytes.
const (
	// MaxContentTypeBytes bounds the Content-Type kept with a stored hook
	// (400 invalid_request beyond it), so that the stored message's headers
	// stay within HookOverheadBytes.
	MaxContentTypeBytes = 1024
	// HookOverheadBytes bounds what a stored hook adds to its body: the
	// subject and the Sluice-* and Nats-* headers. A body larger than the
	// connection's max payload minus this is answered 413.
	HookOverheadBytes = 8192
)

// hookRequest is one webhook on its way through serveHook's phases. A phase
// that refuses the request writes the response and returns false.
type hookRequest struct {
	w              http.ResponseWriter
	r              *http.Request
	start          time.Time
	tenant, source string
	src            Source
	body           []byte
	nonce          *heldNonce // the replay claim this request holds (nil: none)
	key            string     // normalized dedupe key ("" = no dedupe)
	hookID         string
	lims           Limits
	hooksKind      string
	hooksLim       gcra.Limit
	rep            quota.HitReply
}

// heldNonce is a replay claim taken for a request, released again when the
// request is refused later (so that an identical resend is not a replay).
type heldNonce struct {
	store   claims.ReplayStore
	ns, key string
}

// serveHook is POST /v1/hooks/{tenant}/{source}: resolve the source, read
// the body, verify (before any charge or claim: a forged request spends no
// budget and claims no key), admit (charges plus dedupe claim), store
// durably and only then answer 2xx.
func (h *Handler) serveHook(w http.ResponseWriter, r *http.Request) {
	q := &hookRequest{w: w, r: r, start: h.cfg.Now(), tenant: r.PathValue("tenant"), source: r.PathValue("source")}
	if !h.resolveSource(q) || !h.readBody(q) || !h.verify(q) {
		return
	}
	if !h.admit(q) || !h.store(q) {
		h.releaseNonce(q)
	}
}

// resolveSource checks the names and finds the source's configuration.
func (h *Handler) resolveSource(q *hookRequest) bool {
	switch {
	case !ValidName(q.tenant):
		h.fail(q.w, "invalid", http.StatusBadRequest, errorBody{Error: "invalid_tenant"})
		return false
	case !ValidName(q.source):
		h.fail(q.w, "invalid", http.StatusBadRequest, errorBody{Error: "invalid_source"})
		return false
	case len(q.r.Header.Get("Content-Type")) > MaxContentTypeBytes:
		h.fail(q.w, "invalid", http.StatusBadRequest, errorBody{Error: "invalid_request"})
		return false
	}
	src, err := h.cfg.Policy.Source(q.tenant, q.source)
	if errors.Is(err, ErrSourceUnavailable) {
		q.w.Header().Set("Retry-After", "5")
		h.fail(q.w, "unavailable", http.StatusServiceUnavailable, errorBody{Error: "source_unavailable"})
		return false
	}
	if err != nil {
		h.fail(q.w, "unknown_source", http.StatusNotFound, errorBody{Error: "unknown_source"})
		return false
	}
	q.src = src
	return true
}

// bodyLimit is the largest body the source accepts that also fits in one
// NATS message with its headers.
func (h *Handler) bodyLimit(src Source) int64 {
	limit := src.MaxBodyBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	if h.cfg.MaxPayload != nil {
		if mp := h.cfg.MaxPayload() - HookOverheadBytes; mp > 0 && mp < limit {
			limit = mp
		}
	}
	return limit
}

// readBody reads at most the body limit (413 beyond it).
func (h *Handler) readBody(q *hookRequest) bool {
	limit := h.bodyLimit(q.src)
	tooLarge := func() bool {
		h.fail(q.w, "too_large", http.StatusRequestEntityTooLarge, errorBody{Error: "payload_too_large", Limit: limit})
		return false
	}
	if q.r.ContentLength > limit {
		return tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(q.w, q.r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge()
		}
		h.fail(q.w, "invalid", http.StatusBadRequest, errorBody{Error: "invalid_request"})
		return false
	}
	q.body = body
	return true
}

// verify checks the signature of a verifying source, within the source's
// budget of verification failures: each attempt is charged as a failure
// first and refunded when it verifies, so forged requests cost at most
// that budget of HMAC work (then 429 until it refills) and valid ones
// nothing. It then claims the replay nonce.
func (h *Handler) verify(q *hookRequest) bool {
	if q.src.Verify == nil {
		return true
	}
	fkey, now := q.tenant+"/"+q.source, q.start.UnixMicro()
	if d, err := h.failures.Charge(fkey, h.failLimit, now); err == nil && !d.Allowed {
		q.w.Header().Set("Retry-After", retryAfterSeconds(d.RetryAfter))
		h.fail(q.w, "verify_limited", http.StatusTooManyRequests, errorBody{Error: "rate_limited", RetryAfterMs: max(1, d.RetryAfter.Milliseconds())})
		return false
	}
	v, err := q.src.Verify(q.r.Header, q.body, q.start)
	if err != nil {
		h.log.Debug("verification failed", "tenant", q.tenant, "source", q.source, "reason", err.Error())
		h.fail(q.w, "verification_failed", http.StatusUnauthorized, errorBody{Error: "verification_failed"})
		return false
	}
	h.failures.Refund(fkey, h.failLimit, now)
	if v.Timestamp == 0 {
		// No signed timestamp (GitHub): a captured request re-sent with a
		// fresh delivery id carries a valid signature forever. Dedupe on
		// the signed content instead, so that it (and a genuine
		// redelivery) is a duplicate of the original.
		q.key = ContentKey(q.body)
	}
	return h.claimNonce(q, v)
}

// ContentKey is the dedupe key of a hook whose signature covers no
// timestamp: "body-sha256:<hex>" of the signed body (the signature is a
// function of it).
func ContentKey(body []byte) string {
	sum := sha256.Sum256(body)
	return "body-sha256:" + hex.EncodeToString(sum[:])
}

// ReplayNamespace is the replay namespace of a tenant's source:
// "tenant/source", or "sha256:<hex>" of it when that would exceed
// claims.MaxReplayPartBytes (two 128-byte names), so every pair fits.
func ReplayNamespace(tenant, source string) string {
	ns := tenant + "/" + source
	if len(ns) <= claims.MaxReplayPartBytes {
		return ns
	}
	sum := sha256.Sum256([]byte(ns))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// claimNonce claims the verified message's (id, timestamp) so a captured
// request cannot be replayed; the claim is held in q until the hook is
// stored (or released).
func (h *Handler) claimNonce(q *hookRequest, v Verified) bool {
	// Without a signed timestamp (GitHub) an exact replay cannot be told
	// from a genuine redelivery: the content key's dedupe answers both.
	if h.cfg.Replay == nil || v.MessageID == "" || v.Timestamp == 0 {
		return true
	}
	ns := ReplayNamespace(q.tenant, q.source)
	key := v.MessageID + "/" + strconv.FormatInt(v.Timestamp, 10)
	if len(key) > claims.MaxReplayPartBytes {
		key = claims.NormalizeKey(key)
		if len(key) > claims.MaxReplayPartBytes {
			key = key[:claims.MaxReplayPartBytes]
		}
	}
	retain := v.Timestamp + int64(math.Ceil(v.Tolerance.Seconds()))
	if retain > claims.MaxRetainUntil {
		retain = claims.MaxRetainUntil
	}
	ctx := q.r.Context()
	store := h.cfg.Replay
	cctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	out, err := store.Claim(cctx, ns, key, retain)
	cancel()
	if err != nil && errors.Is(err, claims.ErrUnavailable) && h.cfg.LocalReplay != nil {
		h.m.fallback.WithLabelValues("replay").Inc()
		store = h.cfg.LocalReplay
		out, err = store.Claim(ctx, ns, key, retain)
	}
	if err != nil {
		h.m.replay.WithLabelValues("error").Inc()
		if errors.Is(err, claims.ErrInvalid) {
			h.fail(q.w, "verification_failed", http.StatusUnauthorized, errorBody{Error: "verification_failed"})
			return false
		}
		h.log.Warn("replay claim failed", "tenant", q.tenant, "error", err)
		return h.unavailable(q)
	}
	h.m.replay.WithLabelValues(out.String()).Inc()
	switch out {
	case claims.Claimed:
		q.nonce = &heldNonce{store: store, ns: ns, key: key}
		return true
	case claims.AlreadyClaimed:
		h.fail(q.w, "replay", http.StatusUnauthorized, errorBody{Error: "verification_failed"})
		return false
	default: // Full: we cannot remember the nonce, so we cannot accept it safely.
		h.log.Warn("replay store full")
		return h.unavailable(q)
	}
}

// releaseNonce gives back the replay claim of a request that was not
// stored, so that its identical resend (after a 429, 409 or 503) is
// judged afresh instead of as a replay.
func (h *Handler) releaseNonce(q *hookRequest) {
	if q.nonce == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(q.r.Context()), h.cfg.StoreTimeout)
	defer cancel()
	if err := q.nonce.store.Release(ctx, q.nonce.ns, q.nonce.key); err != nil {
		// The nonce then stays until its retention ends: a resend is 401.
		h.m.replay.WithLabelValues("release_failed").Inc()
		h.log.Warn("replay release failed", "tenant", q.tenant, "error", err)
		return
	}
	h.m.replay.WithLabelValues("released").Inc()
}

// unavailable answers 503 store_unavailable.
func (h *Handler) unavailable(q *hookRequest) bool {
	q.w.Header().Set("Retry-After", "1")
	h.fail(q.w, "store_unavailable", http.StatusServiceUnavailable, errorBody{Error: "store_unavailable"})
	return false
}

// admit charges the budgets (the source's own, or its tenant's) and takes
// the dedupe claim in one round trip, and answers every outcome but ok.
func (h *Handler) admit(q *hookRequest) bool {
	if q.src.Dedupe != nil && q.key == "" {
		if k, ok := q.src.Dedupe(q.r.Header, q.body); ok && k != "" {
			q.key = claims.NormalizeKey(k)
		}
	}
	req, ok := h.hitRequest(q)
	if !ok {
		return false
	}
	hctx, cancel := context.WithTimeout(q.r.Context(), h.cfg.StoreTimeout)
	t0 := time.Now()
	rep, err := h.cfg.Admitter.Hit(hctx, req)
	h.m.hitLatency.Observe(time.Since(t0).Seconds())
	cancel()
	if err != nil {
		if errors.Is(err, quota.ErrInvalid) {
			h.log.Warn("hit rejected as invalid", "tenant", q.tenant, "error", err)
			h.fail(q.w, "invalid", http.StatusBadRequest, errorBody{Error: "invalid_request"})
			return false
		}
		h.log.Warn("hit failed", "tenant", q.tenant, "error", err)
		return h.unavailable(q)
	}
	q.rep = rep
	if rep.Local {
		h.m.fallback.WithLabelValues("hit").Inc()
	}
	return h.answerHit(q)
}

// hitRequest builds the charges and the claim of q.
func (h *Handler) hitRequest(q *hookRequest) (quota.HitRequest, bool) {
	q.lims, _ = h.EffectiveLimits(q.tenant)
	hooksKind, bytesKind := quota.KindHooks, quota.KindBytes
	if q.src.Limits != nil {
		q.lims = *q.src.Limits
		hooksKind, bytesKind = SourceKind(quota.KindHooks, q.source), SourceKind(quota.KindBytes, q.source)
	}
	q.hooksKind = hooksKind
	invalidLimits := func(kind string, err error) (quota.HitRequest, bool) {
		h.log.Error("invalid "+kind+" limit", "tenant", q.tenant, "error", err)
		h.fail(q.w, "config", http.StatusInternalServerError, errorBody{Error: "invalid_limits"})
		return quota.HitRequest{}, false
	}
	hooksLim, err := gcra.LimitFromRate(q.lims.Hooks.Rate, q.lims.Hooks.Burst)
	if err != nil {
		return invalidLimits("hooks", err)
	}
	q.hooksLim = hooksLim
	req := quota.HitRequest{Charges: []quota.Charge{{
		Kind: hooksKind, Tenant: q.tenant, IncrementUs: hooksLim.Increment, CapacityUs: hooksLim.Capacity,
	}}}
	if len(q.body) > 0 {
		bytesLim, err := gcra.LimitFromRateN(q.lims.Bytes.Rate, q.lims.Bytes.Burst, int64(len(q.body)))
		if errors.Is(err, gcra.ErrImpossible) {
			// Larger than the whole bytes burst: it could never pass.
			h.fail(q.w, "too_large", http.StatusRequestEntityTooLarge, errorBody{Error: "payload_too_large", Limit: q.lims.Bytes.Burst})
			return quota.HitRequest{}, false
		}
		if err != nil {
			return invalidLimits("bytes", err)
		}
		req.Charges = append(req.Charges, quota.Charge{
			Kind: bytesKind, Tenant: q.tenant, IncrementUs: bytesLim.Increment, CapacityUs: bytesLim.Capacity,
		})
	}
	q.hookID = h.cfg.NewID()
	if q.key != "" {
		req.Claim = &quota.ClaimRequest{
			Tenant: q.tenant, Source: q.source, Key: q.key, HookID: q.hookID,
			TTLMs: h.cfg.DedupeTTL.Milliseconds(), PendingTTLMs: h.cfg.PendingTTL.Milliseconds(),
		}
	}
	return req, true
}

// answerHit answers every hit result but ok (429, 200 duplicate, 409).
func (h *Handler) answerHit(q *hookRequest) bool {
	w, rep := q.w, q.rep
	setPolicyHeaders(w, q.lims, q.hooksLim)
	switch rep.Result {
	case quota.ResultRateLimited:
		ra := time.Duration(rep.RetryAfterMs) * time.Millisecond
		w.Header().Set("Retry-After", retryAfterSeconds(ra))
		w.Header().Set("RateLimit", fmt.Sprintf(`"hooks";r=0;t=%s`, retryAfterSeconds(ra)))
		if h.cfg.Lifecycle != nil {
			h.cfg.Lifecycle.LimitDenied(q.tenant, q.source, "", ra)
		}
		h.fail(w, "rate_limited", http.StatusTooManyRequests, errorBody{Error: "rate_limited", RetryAfterMs: max(1, rep.RetryAfterMs)})
		return false
	case quota.ResultDuplicate:
		h.m.claimOutcome.WithLabelValues("duplicate").Inc()
		h.setRemaining(w, rep, q.hooksKind)
		w.Header().Set("X-Hook-Id", rep.HookID)
		h.m.requests.WithLabelValues("duplicate", "200").Inc()
		writeJSON(w, http.StatusOK, duplicateBody{Status: "duplicate", ID: rep.HookID, Duplicate: true})
		return false
	case quota.ResultPending:
		h.m.claimOutcome.WithLabelValues("pending").Inc()
		ra := time.Duration(rep.RetryAfterMs) * time.Millisecond
		w.Header().Set("Retry-After", retryAfterSeconds(ra))
		h.fail(w, "in_flight", http.StatusConflict, errorBody{Error: "in_flight", RetryAfterMs: max(1, rep.RetryAfterMs)})
		return false
	case quota.ResultOK:
		h.setRemaining(w, rep, q.hooksKind)
		if q.key != "" {
			h.m.claimOutcome.WithLabelValues("ok").Inc()
		}
		return true
	default:
		h.log.Error("unknown hit result", "result", rep.Result)
		return h.unavailable(q)
	}
}

// store publishes the hook and waits for JetStream's ack — only that makes
// a 2xx possible — then settles the claim (or releases it on failure).
func (h *Handler) store(q *hookRequest) bool {
	// Claims always live in the fleet store, also when the charges were
	// decided locally (see quota.Fleet): one winner per key.
	id := claims.ID{Tenant: q.tenant, Source: q.source, Key: q.key}
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(q.r.Context()), h.cfg.PublishTimeout)
	t1 := time.Now()
	_, err := h.cfg.Hooks.Store(pctx, Hook{
		ID: q.hookID, Tenant: q.tenant, Source: q.source, DedupeKey: q.key,
		ReceivedAt: q.start, ContentType: q.r.Header.Get("Content-Type"), Body: q.body,
	})
	h.m.pubLatency.Observe(time.Since(t1).Seconds())
	pcancel()
	if err != nil {
		h.log.Warn("hook not stored", "tenant", q.tenant, "source", q.source, "hook_id", q.hookID, "error", err)
		if q.key != "" {
			h.releaseClaim(q, id)
		}
		return h.unavailable(q)
	}
	if h.cfg.Lifecycle != nil {
		h.cfg.Lifecycle.HookStored(q.tenant, q.source, q.key, q.hookID)
	}
	if q.key != "" {
		h.settleClaim(q, id)
	}
	q.w.Header().Set("X-Hook-Id", q.hookID)
	h.m.requests.WithLabelValues("accepted", "202").Inc()
	h.log.Debug("hook accepted", "tenant", q.tenant, "source", q.source, "hook_id", q.hookID, "bytes", len(q.body), "elapsed", time.Since(q.start))
	writeJSON(q.w, http.StatusAccepted, acceptedBody{Status: "accepted", ID: q.hookID})
	return true
}

// releaseClaim gives the pending claim of a hook that was not stored back.
func (h *Handler) releaseClaim(q *hookRequest, id claims.ID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(q.r.Context()), h.cfg.StoreTimeout)
	defer cancel()
	if err := h.cfg.Claims.Release(ctx, id, q.hookID, q.rep.Revision); err != nil {
		// The pending claim then expires after its TTL.
		h.m.claimOutcome.WithLabelValues("release_failed").Inc()
		h.log.Warn("claim release failed", "hook_id", q.hookID, "error", err)
		return
	}
	h.m.claimOutcome.WithLabelValues("released").Inc()
}

// settleClaim commits the claim of a stored hook. q.rep.Revision is our
// own claim's (the hit took it for q.hookID): it settles in one write.
func (h *Handler) settleClaim(q *hookRequest, id claims.ID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(q.r.Context()), h.cfg.StoreTimeout*4)
	defer cancel()
	if err := claims.SettleOwn(ctx, h.cfg.Claims, id, q.hookID, q.rep.Revision, h.cfg.DedupeTTL); err != nil {
		// The hook is durable: still 202 (at-least-once). The key may be
		// accepted once more after the pending claim expires.
		h.m.claimOutcome.WithLabelValues("settle_lost").Inc()
		h.log.Warn("settle failed after store; key may be accepted again", "hook_id", q.hookID, "error", err)
		return
	}
	h.m.claimOutcome.WithLabelValues("settled").Inc()
}
