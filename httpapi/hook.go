package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/webhook"
)

// Bounds of a webhook request besides its source's max_body_bytes.
const (
	// MaxContentTypeBytes bounds the Content-Type kept with a stored hook
	// (400 invalid_request beyond it), so that the stored message's headers
	// stay within hooks.OverheadBytes.
	MaxContentTypeBytes = 1024
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
	idempotency    bool       // key is the sender's Idempotency-Key (Source.Dedupe)
	hookID         string
	lims           Limits
	hooksKind      string
	hooksLim       gcra.Limit
	req            protocol.HitRequest
	rep            protocol.HitReply
	// tctx and span are the hook's trace span and its context (nil:
	// tracing off).
	tctx context.Context
	span trace.Span
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
	start := h.cfg.Now()
	if h.cfg.AccessLog != nil {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		w = rec
		defer h.logAccess(r, rec, start)
	}
	// Load shedding before any work: beyond
	// MaxInFlight hooks, 503 at once.
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		h.fail(w, "overloaded", protocol.Overloaded, errorBody{})
		return
	}
	q := &hookRequest{w: w, r: r, start: start, tenant: r.PathValue("tenant"), source: r.PathValue("source")}
	if h.startHookSpan(q); q.span != nil {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		q.w = rec
		defer func() { q.endHookSpan(rec.code) }()
	}
	if !h.resolveSource(q) || !h.checkAccess(q) || !h.answerCRC(q) || !h.readBody(q) || !h.storeWritable(q) || !h.verify(q) || !h.answerChallenge(q) {
		return
	}
	if !h.admit(q) || !h.store(q) {
		h.releaseNonce(q)
	}
}

// logAccess writes the access log's line of a hook answered rec.code:
// its tenant and source as the path names them, the hook id (X-Hook-Id:
// a stored hook's, or the one a duplicate names; "" when refused), the
// request id and the time from arrival to answer.
func (h *Handler) logAccess(r *http.Request, rec *statusRecorder, start time.Time) {
	h.cfg.AccessLog.LogAttrs(r.Context(), slog.LevelInfo, "hook",
		slog.String("tenant", r.PathValue("tenant")), slog.String("source", r.PathValue("source")),
		slog.Int("status", rec.code), slog.String("id", rec.Header().Get("X-Hook-Id")),
		slog.String("request_id", rec.Header().Get("X-Request-Id")),
		slog.Float64("duration_ms", float64(h.cfg.Now().Sub(start).Microseconds())/1000))
}

// resolveSource checks the names and finds the source's configuration.
func (h *Handler) resolveSource(q *hookRequest) bool {
	switch {
	case !ValidName(q.tenant):
		h.fail(q.w, "invalid", protocol.InvalidTenant, errorBody{})
		return false
	case !ValidName(q.source):
		h.fail(q.w, "invalid", protocol.InvalidSource, errorBody{})
		return false
	case len(q.r.Header.Get("Content-Type")) > MaxContentTypeBytes:
		h.fail(q.w, "invalid", protocol.InvalidRequest, errorBody{})
		return false
	}
	src, err := h.cfg.Policy.Source(q.tenant, q.source)
	if errors.Is(err, ErrSourceUnavailable) {
		q.w.Header().Set("Retry-After", "5")
		h.fail(q.w, "unavailable", protocol.SourceUnavailable, errorBody{})
		return false
	}
	if err != nil {
		h.fail(q.w, "unknown_source", protocol.UnknownSource, errorBody{})
		return false
	}
	q.src = src
	return true
}

// hookMethods are the methods routed to serveHook; a source accepts POST
// unless its Methods say otherwise (config.HookMethods()).
var hookMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodGet}

// checkAccess applies the source's request policy before any work, in
// this order (docs/PROTOCOL.md): the client address (403), the method
// (405) and the content type (415). The address goes first so that one
// outside ip_allow learns nothing of the source's methods (no Allow
// header) or media types.
func (h *Handler) checkAccess(q *hookRequest) bool {
	if len(q.src.IPAllow) > 0 {
		ip, ok := h.clientIP(q.r)
		if !ok || !slices.ContainsFunc(q.src.IPAllow, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			h.fail(q.w, "forbidden", protocol.Forbidden, errorBody{})
			return false
		}
	}
	methods := q.src.Methods
	if methods == nil {
		methods = hookMethods[:1]
	}
	if q.r.Method == http.MethodGet && q.src.CRC != nil {
		return true // the CRC handshake (answerCRC)
	}
	if !slices.Contains(methods, q.r.Method) {
		q.w.Header().Set("Allow", strings.Join(methods, ", "))
		h.fail(q.w, "method_not_allowed", protocol.MethodNotAllowed, errorBody{})
		return false
	}
	if len(q.src.ContentTypes) > 0 && !acceptsContentType(q.src.ContentTypes, q.r.Header.Get("Content-Type")) {
		h.fail(q.w, "unsupported_media_type", protocol.UnsupportedMediaType, errorBody{})
		return false
	}
	return true
}

// answerCRC answers a CRC source's GET ?crc_token=T (checkAccess lets GET
// through only for such a source) without storing anything.
func (h *Handler) answerCRC(q *hookRequest) bool {
	if q.r.Method != http.MethodGet {
		return true
	}
	tok := q.r.URL.Query().Get("crc_token")
	if !webhook.ValidCRCToken(tok) {
		h.fail(q.w, "invalid", protocol.InvalidRequest, errorBody{})
		return false
	}
	resp, ok := q.src.CRC(tok)
	if !ok {
		q.w.Header().Set("Retry-After", "5")
		h.fail(q.w, "unavailable", protocol.SourceUnavailable, errorBody{})
		return false
	}
	h.m.requests.WithLabelValues("handshake", "200").Inc()
	writeJSON(q.w, http.StatusOK, map[string]string{"response_token": resp})
	return false
}

// maxChallengeBytes bounds an echoed url_verification challenge.
const maxChallengeBytes = 1024

// answerChallenge runs after verification: a CRC source refuses a body a
// CRC token could be (its CRC answer is a valid signature of it), and a
// url_verification source answers the challenge instead of storing it.
func (h *Handler) answerChallenge(q *hookRequest) bool {
	if q.src.CRC != nil && webhook.ValidCRCToken(string(q.body)) {
		h.fail(q.w, "verification_failed", protocol.VerificationFailed, errorBody{})
		return false
	}
	if !q.src.URLVerification {
		return true
	}
	var c struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if json.Unmarshal(q.body, &c) != nil || c.Type != "url_verification" {
		return true // an event: stored as usual
	}
	if c.Challenge == "" || len(c.Challenge) > maxChallengeBytes {
		h.fail(q.w, "invalid", protocol.InvalidRequest, errorBody{})
		return false
	}
	h.m.requests.WithLabelValues("handshake", "200").Inc()
	writeJSON(q.w, http.StatusOK, map[string]string{"challenge": c.Challenge})
	return false
}

// acceptsContentType reports whether the media type of ct (parameters
// ignored, case-insensitive) is one of allowed ("type/*" matches a type).
func acceptsContentType(allowed []string, ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	typ, _, _ := strings.Cut(mt, "/")
	for _, a := range allowed {
		if a == mt || strings.HasSuffix(a, "/*") && a[:len(a)-2] == typ {
			return true
		}
	}
	return false
}

// clientIP is the request's client: the peer, or, when the peer is a
// trusted proxy, the rightmost address of ClientIPHeader that is not a
// trusted proxy (addresses left of it are the client's to forge). ok is
// false when no address can be read.
func (h *Handler) clientIP(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	ip := ap.Addr().Unmap()
	if !h.trusted(ip) {
		return ip, true
	}
	vals := r.Header.Values(h.cfg.ClientIPHeader)
	for i := len(vals) - 1; i >= 0; i-- {
		parts := strings.Split(vals[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return netip.Addr{}, false // a malformed hop: refuse, never guess
			}
			if a = a.Unmap(); !h.trusted(a) {
				return a, true
			}
		}
	}
	return ip, true // only trusted proxies: the last one is the client
}

func (h *Handler) trusted(ip netip.Addr) bool {
	return slices.ContainsFunc(h.cfg.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// bodyLimit is the largest body the source accepts that also fits in one
// NATS message with its headers.
func (h *Handler) bodyLimit(src Source) int64 {
	limit := src.MaxBodyBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	if h.cfg.MaxPayload != nil {
		if mp := h.cfg.MaxPayload() - hooks.OverheadBytes; mp > 0 && mp < limit {
			limit = mp
		}
	}
	return limit
}

// readBody reads at most the body limit (413 beyond it).
func (h *Handler) readBody(q *hookRequest) bool {
	limit := h.bodyLimit(q.src)
	tooLarge := func() bool {
		h.fail(q.w, "too_large", protocol.PayloadTooLarge, errorBody{Limit: limit})
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
		h.fail(q.w, "invalid", protocol.InvalidRequest, errorBody{})
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
	_, span := h.child(q, SpanVerify, trace.SpanKindInternal)
	ok := h.verifySignature(q)
	endSpan(span, ok)
	return ok
}

// verifySignature is verify's work (its span apart).
func (h *Handler) verifySignature(q *hookRequest) bool {
	fkey, now := q.tenant+"/"+q.source, q.start.UnixMicro()
	if d, err := h.failures.Charge(fkey, h.failLimit, now); err == nil && !d.Allowed {
		q.w.Header().Set("Retry-After", retryAfterSeconds(d.RetryAfter))
		h.fail(q.w, "verify_limited", protocol.RateLimited, errorBody{RetryAfterMs: max(1, d.RetryAfter.Milliseconds())})
		return false
	}
	v, err := q.src.Verify(q.r.Header, q.body, q.start)
	if err != nil {
		h.log.Debug("verification failed", "tenant", q.tenant, "source", q.source, "reason", err.Error())
		h.fail(q.w, "verification_failed", protocol.VerificationFailed, errorBody{})
		return false
	}
	h.failures.Refund(fkey, h.failLimit, now)
	if v.Timestamp == 0 && v.BodySigned {
		// No signed timestamp (GitHub): a captured request re-sent with a
		// fresh delivery id carries a valid signature forever. Dedupe on
		// the signed content instead, so that it (and a genuine
		// redelivery) is a duplicate of the original. Not for a token or
		// basic auth: the credential signs no body, and two identical
		// legitimate bodies are two hooks (the source's dedupe decides).
		q.key = ContentKey(q.body)
	}
	return h.claimNonce(q, v)
}

// ContentKey is the dedupe key of a hook whose signature covers no
// timestamp: "body-" + BodyDigest of the signed body (the signature is a
// function of it). Such a key is itself the digest of its request: a
// different body is another key, so its claim keeps no digest.
func ContentKey(body []byte) string {
	return "body-" + BodyDigest(body)
}

// BodyDigest is "sha256:<lowercase hex of SHA-256(body)>": what the claim
// of an Idempotency-Key keeps of its first request (claims.Store.SettleOwn)
// to tell a retry from a reuse with another body.
func BodyDigest(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// requestDigest is the digest q's claim keeps: BodyDigest for a key the
// sender picked for one request (Idempotency-Key), else none.
func (q *hookRequest) requestDigest() string {
	if !q.idempotency {
		return ""
	}
	return BodyDigest(q.body)
}

// ReplayNamespace is the replay namespace of a tenant's source:
// "tenant/source", or "sha256:<hex>" of it when that would exceed
// protocol.MaxNameBytes (two 128-byte names), so every pair fits.
func ReplayNamespace(tenant, source string) string {
	ns := tenant + "/" + source
	if len(ns) <= protocol.MaxNameBytes {
		return ns
	}
	sum := sha256.Sum256([]byte(ns))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// claimNonce claims the verified message's (id, timestamp) so a captured
// request cannot be replayed; the claim is held in q until the hook is
// stored (or released). A nonce the replay store cannot claim is refused
// (503 with Retry-After), never claimed in this node's memory instead: on
// a fleet another node would then admit the same nonce, and a restart
// would forget it (fail closed, docs/RELIABILITY.md).
func (h *Handler) claimNonce(q *hookRequest, v Verified) bool {
	// Without a signed timestamp (GitHub) an exact replay cannot be told
	// from a genuine redelivery: the content key's dedupe answers both.
	if h.cfg.Replay == nil || v.MessageID == "" || v.Timestamp == 0 {
		return true
	}
	ns := ReplayNamespace(q.tenant, q.source)
	key := v.MessageID + "/" + strconv.FormatInt(v.Timestamp, 10)
	if len(key) > protocol.MaxNameBytes {
		key = claims.NormalizeKey(key)
		if len(key) > protocol.MaxNameBytes {
			key = key[:protocol.MaxNameBytes]
		}
	}
	retain := v.Timestamp + int64(math.Ceil(v.Tolerance.Seconds()))
	if retain > protocol.MaxRetainUntil {
		retain = protocol.MaxRetainUntil
	}
	store := h.cfg.Replay
	cctx, cancel := context.WithTimeout(q.r.Context(), h.cfg.StoreTimeout)
	out, err := store.Claim(cctx, ns, key, retain)
	cancel()
	if err != nil {
		h.m.replay.WithLabelValues("error").Inc()
		if errors.Is(err, protocol.ErrInvalid) {
			h.fail(q.w, "verification_failed", protocol.VerificationFailed, errorBody{})
			return false
		}
		h.log.Warn("replay claim failed", "tenant", q.tenant, "error", err)
		return h.unavailable(q)
	}
	h.m.replay.WithLabelValues(out.String()).Inc()
	switch out {
	case protocol.Claimed:
		q.nonce = &heldNonce{store: store, ns: ns, key: key}
		return true
	case protocol.AlreadyClaimed:
		h.fail(q.w, "replay", protocol.VerificationFailed, errorBody{})
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

// storeWritable answers 503 store_unavailable at once when the node's
// store cannot write (Config.StoreFailed): no write of this hook (its
// nonce, its claim, the hook) could be made durable, and each would wait
// out its timeout.
func (h *Handler) storeWritable(q *hookRequest) bool {
	if h.cfg.StoreFailed == nil || h.cfg.StoreFailed() == nil {
		return true
	}
	return h.unavailable(q)
}

// unavailable answers 503 store_unavailable.
func (h *Handler) unavailable(q *hookRequest) bool {
	q.w.Header().Set("Retry-After", "1")
	h.fail(q.w, "store_unavailable", protocol.StoreUnavailable, errorBody{})
	return false
}

// admit charges the budgets (the source's own, or its tenant's) and takes
// the dedupe claim in one round trip, and answers every outcome but ok.
func (h *Handler) admit(q *hookRequest) bool {
	if q.src.Dedupe != nil && q.key == "" {
		if k, idem, ok := q.src.Dedupe(q.r.Header, q.body); ok && k != "" {
			q.key, q.idempotency = claims.NormalizeKey(k), idem
		}
	}
	req, ok := h.hitRequest(q)
	if !ok {
		return false
	}
	sctx, span := h.child(q, SpanHit, trace.SpanKindInternal)
	hctx, cancel := context.WithTimeout(sctx, h.cfg.StoreTimeout)
	t0 := time.Now()
	rep, err := h.cfg.Admitter.Hit(hctx, req)
	h.m.hitLatency.Observe(time.Since(t0).Seconds())
	cancel()
	endSpan(span, err == nil)
	if err != nil {
		if errors.Is(err, protocol.ErrInvalid) {
			h.log.Warn("hit rejected as invalid", "tenant", q.tenant, "error", err)
			h.fail(q.w, "invalid", protocol.InvalidRequest, errorBody{})
			return false
		}
		h.log.Warn("hit failed", "tenant", q.tenant, "error", err)
		if q.key != "" {
			h.releaseLostClaim(q)
		}
		return h.unavailable(q)
	}
	q.req, q.rep = req, rep
	if rep.Fallback {
		h.m.fallback.WithLabelValues("hit").Inc()
	}
	return h.answerHit(q)
}

// hitRequest builds the charges and the claim of q.
func (h *Handler) hitRequest(q *hookRequest) (protocol.HitRequest, bool) {
	q.lims, _ = h.EffectiveLimits(q.tenant)
	hooksKind, bytesKind := protocol.KindHooks, protocol.KindBytes
	if q.src.Limits != nil {
		q.lims = *q.src.Limits
		hooksKind, bytesKind = SourceKind(protocol.KindHooks, q.source), SourceKind(protocol.KindBytes, q.source)
	}
	q.hooksKind = hooksKind
	invalidLimits := func(kind string, err error) (protocol.HitRequest, bool) {
		h.log.Error("invalid "+kind+" limit", "tenant", q.tenant, "error", err)
		h.fail(q.w, "config", protocol.InvalidLimits, errorBody{})
		return protocol.HitRequest{}, false
	}
	hooksLim, err := gcra.LimitFromRate(q.lims.Hooks.Rate, q.lims.Hooks.Burst)
	if err != nil {
		return invalidLimits("hooks", err)
	}
	q.hooksLim = hooksLim
	req := protocol.HitRequest{Charges: []protocol.Charge{{
		Kind: hooksKind, Tenant: q.tenant, IncrementUs: hooksLim.Increment, CapacityUs: hooksLim.Capacity,
	}}}
	if len(q.body) > 0 {
		bytesLim, err := gcra.LimitFromRateN(q.lims.Bytes.Rate, q.lims.Bytes.Burst, int64(len(q.body)))
		if errors.Is(err, gcra.ErrImpossible) {
			// Larger than the whole bytes burst: it could never pass.
			h.fail(q.w, "too_large", protocol.PayloadTooLarge, errorBody{Limit: q.lims.Bytes.Burst})
			return protocol.HitRequest{}, false
		}
		if err != nil {
			return invalidLimits("bytes", err)
		}
		req.Charges = append(req.Charges, protocol.Charge{
			Kind: bytesKind, Tenant: q.tenant, IncrementUs: bytesLim.Increment, CapacityUs: bytesLim.Capacity,
		})
	}
	q.hookID = h.cfg.NewID()
	if q.key != "" {
		req.Claim = &protocol.ClaimRequest{
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
	case protocol.ResultRateLimited:
		ra := time.Duration(rep.RetryAfterMs) * time.Millisecond
		w.Header().Set("Retry-After", retryAfterSeconds(ra))
		w.Header().Set("RateLimit", fmt.Sprintf(`"hooks";r=0;t=%s`, retryAfterSeconds(ra)))
		if h.cfg.Lifecycle != nil {
			h.cfg.Lifecycle.LimitDenied(q.tenant, q.source, events.DeniedKind(&q.req, &rep), ra)
		}
		h.fail(w, "rate_limited", protocol.RateLimited, errorBody{RetryAfterMs: max(1, rep.RetryAfterMs)})
		return false
	case protocol.ResultDuplicate:
		if q.idempotency {
			if reused, ok := h.keyReused(q); !ok {
				return h.unavailable(q)
			} else if reused {
				h.m.claimOutcome.WithLabelValues("key_reused").Inc()
				h.fail(w, "key_reused", protocol.IdempotencyKeyReused, errorBody{})
				return false
			}
		}
		if !h.durable(q) {
			return false // the hook the duplicate names may be in flight
		}
		h.m.claimOutcome.WithLabelValues("duplicate").Inc()
		h.setRemaining(w, rep, q.hooksKind)
		w.Header().Set("X-Hook-Id", rep.HookID)
		h.m.requests.WithLabelValues("duplicate", "200").Inc()
		writeJSON(w, http.StatusOK, duplicateBody{Status: "duplicate", ID: rep.HookID, Duplicate: true})
		return false
	case protocol.ResultPending:
		h.m.claimOutcome.WithLabelValues("pending").Inc()
		ra := time.Duration(rep.RetryAfterMs) * time.Millisecond
		w.Header().Set("Retry-After", retryAfterSeconds(ra))
		h.fail(w, "in_flight", protocol.InFlight, errorBody{RetryAfterMs: max(1, rep.RetryAfterMs)})
		return false
	case protocol.ResultOK:
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

// keyReused reports whether q's Idempotency-Key, answered duplicate, was
// committed for another request: its claim keeps the first body's digest,
// and a different digest is a reuse of the key (the IETF draft's 422), not
// a retry. A claim without a digest (or read from a replica behind the
// settle) or no longer committed is a duplicate. ok is false when the claim
// cannot be read (503: never a duplicate for a body not compared).
func (h *Handler) keyReused(q *hookRequest) (reused, ok bool) {
	ctx, cancel := context.WithTimeout(q.r.Context(), h.cfg.StoreTimeout)
	defer cancel()
	st, err := h.cfg.Claims.Get(ctx, claims.ID{Tenant: q.tenant, Source: q.source, Key: q.key})
	if err != nil {
		h.log.Warn("claim read failed", "tenant", q.tenant, "error", err)
		return false, false
	}
	return st.State == protocol.StateCommitted && st.Digest != "" && st.Digest != q.requestDigest(), true
}

// store publishes the hook and waits for JetStream's ack — only that makes
// a 2xx possible — then settles the claim (or releases it on failure).
func (h *Handler) store(q *hookRequest) bool {
	// Claims always live in the fleet store, also when the charges were
	// decided locally (see quota.Fleet): one winner per key.
	id := claims.ID{Tenant: q.tenant, Source: q.source, Key: q.key}
	// The store span's context travels with the hook (traceparent).
	sctx, span := h.child(q, SpanStore, trace.SpanKindProducer)
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(sctx), h.cfg.PublishTimeout)
	t1 := time.Now()
	hook := hooks.Hook{
		ID: q.hookID, Tenant: q.tenant, Source: q.source, DedupeKey: q.key,
		ReceivedAt: q.start, ContentType: q.r.Header.Get("Content-Type"), Body: q.body,
	}
	if q.src.EventType != nil {
		hook.Typed, hook.Type = true, q.src.EventType(q.r.Header, q.body)
	}
	_, err := h.cfg.Hooks.Store(pctx, hook)
	h.m.pubLatency.Observe(time.Since(t1).Seconds())
	pcancel()
	endSpan(span, err == nil)
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
	if !h.durable(q) {
		return false
	}
	q.w.Header().Set("X-Hook-Id", q.hookID)
	h.m.requests.WithLabelValues("accepted", "202").Inc()
	h.log.Debug("hook accepted", "tenant", q.tenant, "source", q.source, "hook_id", q.hookID, "bytes", len(q.body), "elapsed", time.Since(q.start))
	writeJSON(q.w, http.StatusAccepted, acceptedBody{Status: "accepted", ID: q.hookID})
	return true
}

// durable waits for the durability barrier (Config.Sync): one round of
// syncs after the acks the answer rests on. A failure answers 503: the
// hook may be in the page cache only, so it is not acknowledged (its
// sender's retry is answered from the barrier again).
func (h *Handler) durable(q *hookRequest) bool {
	if h.cfg.Sync == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(q.r.Context()), h.cfg.PublishTimeout)
	defer cancel()
	t0 := time.Now()
	// A cluster's round that could not vouch for another shard's
	// streams still vouches for this tenant's.
	err := durability.ForScope(h.cfg.Sync.Sync(ctx), durability.SyncScope{Tenant: q.tenant, Replay: q.nonce != nil})
	h.m.syncLatency.Observe(time.Since(t0).Seconds())
	if err != nil {
		h.log.Error("hook not durable: the store's sync failed", "tenant", q.tenant, "source", q.source, "hook_id", q.hookID, "error", err)
		h.unavailable(q)
		return false
	}
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

// releaseLostClaim gives back the pending claim that a hit whose answer
// was lost may have taken under q's hook id, so that the sender's retry is
// not answered 409 until the pending TTL. A Claim with the same hook id is
// idempotent and returns the revision the release needs; a key held by
// another hook or committed is left alone.
func (h *Handler) releaseLostClaim(q *hookRequest) {
	id := claims.ID{Tenant: q.tenant, Source: q.source, Key: q.key}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(q.r.Context()), h.cfg.StoreTimeout)
	res, err := h.cfg.Claims.Claim(ctx, id, q.hookID, h.cfg.PendingTTL)
	cancel()
	if err != nil {
		h.m.claimOutcome.WithLabelValues("release_failed").Inc()
		h.log.Warn("could not release the claim of an unanswered hit", "hook_id", q.hookID, "error", err)
		return
	}
	if res.Outcome != claims.OK {
		return // another hook's, or committed
	}
	q.rep.Revision = res.Revision
	h.releaseClaim(q, id)
}

// settleClaim commits the claim of a stored hook. q.rep.Revision is our
// own claim's (the hit took it for q.hookID): it settles in one write,
// which keeps the request's digest for an Idempotency-Key.
func (h *Handler) settleClaim(q *hookRequest, id claims.ID) {
	sctx, span := h.child(q, SpanSettle, trace.SpanKindInternal)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(sctx), h.cfg.StoreTimeout*4)
	defer cancel()
	err := h.cfg.Claims.SettleOwn(ctx, id, q.hookID, q.requestDigest(), q.rep.Revision, h.cfg.DedupeTTL)
	endSpan(span, err == nil)
	if err != nil {
		// The hook is durable: still 202 (at-least-once). The key may be
		// accepted once more after the pending claim expires.
		h.m.claimOutcome.WithLabelValues("settle_lost").Inc()
		h.log.Warn("settle failed after store; key may be accepted again", "hook_id", q.hookID, "error", err)
		return
	}
	h.m.claimOutcome.WithLabelValues("settled").Inc()
}
