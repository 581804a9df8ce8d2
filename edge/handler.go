package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/quota"
)

// Config holds a Handler's dependencies. Policy, Limits, Admitter, Claims
// and Hooks are required; the rest have defaults.
type Config struct {
	Policy      Policy
	Limits      LimitsFunc
	Overrides   *Overrides // fleet-wide admin overrides (nil: none, admin PUT disabled)
	Admitter    Admitter
	Resetter    Resetter           // used by the admin API to reset buckets
	Claims      claims.Store       // the fleet (KV) claim store; the Admitter takes claims there too
	Replay      claims.ReplayStore // replay nonces (nil: no replay protection)
	LocalReplay claims.ReplayStore // replay fallback when Replay is unavailable (nil: answer 503)
	Hooks       HookStorer
	Lifecycle   Lifecycle // lifecycle events (nil: none)

	PendingTTL     time.Duration // pending claim TTL (default 30 s)
	DedupeTTL      time.Duration // committed claim TTL (default 72 h)
	StoreTimeout   time.Duration // budget of one fleet call (default 250 ms)
	PublishTimeout time.Duration // budget of the durable publish (default 5 s)

	AdminToken string       // enables the admin API when set
	Ready      func() error // readiness check for /readyz (nil: always ready)
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time
	NewID      func() string
}

// HookStorer durably stores a hook (HookStore implements it). Any error
// means the hook is not durable.
type HookStorer interface {
	Store(ctx context.Context, h Hook) (uint64, error)
}

// Lifecycle receives lifecycle notifications (events.Publisher implements
// it). Implementations must not block.
type Lifecycle interface {
	HookStored(tenant, source, key, hookID string)
	LimitDenied(tenant, source, kind string, retryAfter time.Duration)
}

// Handler serves the edge's HTTP API.
type Handler struct {
	cfg Config
	mux *http.ServeMux
	m   *metrics
	log *slog.Logger
}

// New validates cfg and returns a Handler.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Policy == nil:
		return nil, errors.New("edge: Config.Policy is required")
	case cfg.Limits == nil:
		return nil, errors.New("edge: Config.Limits is required")
	case cfg.Admitter == nil:
		return nil, errors.New("edge: Config.Admitter is required")
	case cfg.Claims == nil:
		return nil, errors.New("edge: Config.Claims is required")
	case cfg.Hooks == nil:
		return nil, errors.New("edge: Config.Hooks is required")
	}
	if cfg.PendingTTL <= 0 {
		cfg.PendingTTL = 30 * time.Second
	}
	if cfg.DedupeTTL <= 0 {
		cfg.DedupeTTL = 72 * time.Hour
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = 250 * time.Millisecond
	}
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = nuid.Next
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), m: newMetrics(cfg.Registerer), log: cfg.Logger}
	h.mux.HandleFunc("POST /v1/hooks/{tenant}/{source}", h.serveHook)
	h.mux.HandleFunc("/v1/hooks/{tenant}/{source}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "POST")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": "method_not_allowed"})
	})
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "not_found"})
	})
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	h.mux.HandleFunc("GET /readyz", h.serveReady)
	h.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	h.mountAdmin()
	return h, nil
}

// ServeHTTP implements http.Handler. Every response carries X-Request-Id.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := r.Header.Get("X-Request-Id")
	if !validRequestID(rid) {
		rid = nuid.Next()
	}
	w.Header().Set("X-Request-Id", rid)
	// net/http's mux answers a path that is not canonical ("..", ".", "//")
	// with a redirect to the cleaned path, which could send a webhook to
	// another tenant's endpoint: refuse it instead.
	if p := r.URL.EscapedPath(); p != "/" && (p != path.Clean(p) || strings.Contains(p, "%2F") || strings.Contains(p, "%2f")) {
		h.m.requests.WithLabelValues("invalid", "400").Inc()
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "invalid_request"})
		return
	}
	h.mux.ServeHTTP(w, r)
}

func validRequestID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			return false
		}
	}
	return true
}

// tokenByte: [A-Za-z0-9._~-], the bytes PROTOCOL.md allows in a tenant or source.
func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-'
}

// ValidName reports whether s is a valid tenant or source: 1–128 bytes of
// [A-Za-z0-9._~-], and not "." or ".." (path segments no URL can carry).
func ValidName(s string) bool {
	if s == "" || len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			return false
		}
	}
	return true
}

func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Ready != nil {
		if err := h.cfg.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not_ready", "reason": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready"})
}

// EffectiveLimits returns a tenant's limits and their origin: a fleet-wide
// override, the tenant's configuration, or the default.
func (h *Handler) EffectiveLimits(tenant string) (Limits, string) {
	if h.cfg.Overrides != nil {
		if l, ok := h.cfg.Overrides.Get(tenant); ok {
			return l, OriginOverride
		}
	}
	return h.cfg.Limits(tenant)
}

type acceptedBody struct {
	Status string `json:"status"`
	ID     string `json:"id"`
}

type duplicateBody struct {
	Status    string `json:"status"`
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

type errorBody struct {
	Error        string `json:"error"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	Limit        int64  `json:"limit,omitempty"`
}

func (h *Handler) fail(w http.ResponseWriter, outcome string, code int, body errorBody) {
	h.m.requests.WithLabelValues(outcome, strconv.Itoa(code)).Inc()
	h.log.Debug("hook refused", "outcome", outcome, "status", code, "request_id", w.Header().Get("X-Request-Id"))
	writeJSON(w, code, body)
}

// retryAfterSeconds is the delta-seconds of Retry-After: rounded up, >= 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}

func (h *Handler) serveHook(w http.ResponseWriter, r *http.Request) {
	start := h.cfg.Now()
	tenant, source := r.PathValue("tenant"), r.PathValue("source")
	if !ValidName(tenant) {
		h.fail(w, "invalid", http.StatusBadRequest, errorBody{Error: "invalid_tenant"})
		return
	}
	if !ValidName(source) {
		h.fail(w, "invalid", http.StatusBadRequest, errorBody{Error: "invalid_source"})
		return
	}
	src, err := h.cfg.Policy.Source(tenant, source)
	if err != nil {
		h.fail(w, "unknown_source", http.StatusNotFound, errorBody{Error: "unknown_source"})
		return
	}
	limit := src.MaxBodyBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	if r.ContentLength > limit {
		h.fail(w, "too_large", http.StatusRequestEntityTooLarge, errorBody{Error: "payload_too_large", Limit: limit})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.fail(w, "too_large", http.StatusRequestEntityTooLarge, errorBody{Error: "payload_too_large", Limit: limit})
			return
		}
		h.fail(w, "invalid", http.StatusBadRequest, errorBody{Error: "invalid_request"})
		return
	}

	// Verification happens before any charge or claim: a forged request
	// spends no budget and claims no key.
	if src.Verify != nil {
		v, err := src.Verify(r.Header, body, start)
		if err != nil {
			h.log.Debug("verification failed", "tenant", tenant, "source", source, "reason", err.Error())
			h.fail(w, "verification_failed", http.StatusUnauthorized, errorBody{Error: "verification_failed"})
			return
		}
		if ok := h.replayCheck(w, r.Context(), tenant, source, v); !ok {
			return
		}
	}

	var key string
	if src.Dedupe != nil {
		if k, ok := src.Dedupe(r.Header, body); ok && k != "" {
			key = claims.NormalizeKey(k)
		}
	}

	lims, _ := h.EffectiveLimits(tenant)
	hooksLim, err1 := gcra.LimitFromRate(lims.Hooks.Rate, lims.Hooks.Burst)
	if err1 != nil {
		h.log.Error("invalid hooks limit", "tenant", tenant, "error", err1)
		h.fail(w, "config", http.StatusInternalServerError, errorBody{Error: "invalid_limits"})
		return
	}
	req := quota.HitRequest{Charges: []quota.Charge{{
		Kind: quota.KindHooks, Tenant: tenant, IncrementUs: hooksLim.Increment, CapacityUs: hooksLim.Capacity,
	}}}
	var bytesLim gcra.Limit
	if len(body) > 0 {
		bytesLim, err = gcra.LimitFromRateN(lims.Bytes.Rate, lims.Bytes.Burst, int64(len(body)))
		if errors.Is(err, gcra.ErrImpossible) {
			// Larger than the whole bytes burst: it could never pass.
			h.fail(w, "too_large", http.StatusRequestEntityTooLarge, errorBody{Error: "payload_too_large", Limit: lims.Bytes.Burst})
			return
		}
		if err != nil {
			h.log.Error("invalid bytes limit", "tenant", tenant, "error", err)
			h.fail(w, "config", http.StatusInternalServerError, errorBody{Error: "invalid_limits"})
			return
		}
		req.Charges = append(req.Charges, quota.Charge{
			Kind: quota.KindBytes, Tenant: tenant, IncrementUs: bytesLim.Increment, CapacityUs: bytesLim.Capacity,
		})
	}
	hookID := h.cfg.NewID()
	if key != "" {
		req.Claim = &quota.ClaimRequest{
			Tenant: tenant, Source: source, Key: key, HookID: hookID,
			TTLMs: h.cfg.DedupeTTL.Milliseconds(), PendingTTLMs: h.cfg.PendingTTL.Milliseconds(),
		}
	}

	hctx, cancel := context.WithTimeout(r.Context(), h.cfg.StoreTimeout)
	t0 := time.Now()
	rep, err := h.cfg.Admitter.Hit(hctx, req)
	h.m.hitLatency.Observe(time.Since(t0).Seconds())
	cancel()
	if err != nil {
		if errors.Is(err, quota.ErrInvalid) {
			h.log.Warn("hit rejected as invalid", "tenant", tenant, "error", err)
			h.fail(w, "invalid", http.StatusBadRequest, errorBody{Error: "invalid_request"})
			return
		}
		h.log.Warn("hit failed", "tenant", tenant, "error", err)
		w.Header().Set("Retry-After", "1")
		h.fail(w, "store_unavailable", http.StatusServiceUnavailable, errorBody{Error: "store_unavailable"})
		return
	}
	if rep.Local {
		h.m.fallback.WithLabelValues("hit").Inc()
	}
	setPolicyHeaders(w, lims, hooksLim)
	switch rep.Result {
	case quota.ResultRateLimited:
		ra := time.Duration(rep.RetryAfterMs) * time.Millisecond
		w.Header().Set("Retry-After", retryAfterSeconds(ra))
		w.Header().Set("RateLimit", fmt.Sprintf(`"hooks";r=0;t=%s`, retryAfterSeconds(ra)))
		if h.cfg.Lifecycle != nil {
			h.cfg.Lifecycle.LimitDenied(tenant, source, "", ra)
		}
		h.fail(w, "rate_limited", http.StatusTooManyRequests, errorBody{Error: "rate_limited", RetryAfterMs: max(1, rep.RetryAfterMs)})
		return
	case quota.ResultDuplicate:
		h.m.claimOutcome.WithLabelValues("duplicate").Inc()
		h.setRemaining(w, rep)
		w.Header().Set("X-Hook-Id", rep.HookID)
		h.m.requests.WithLabelValues("duplicate", "200").Inc()
		writeJSON(w, http.StatusOK, duplicateBody{Status: "duplicate", ID: rep.HookID, Duplicate: true})
		return
	case quota.ResultPending:
		h.m.claimOutcome.WithLabelValues("pending").Inc()
		ra := time.Duration(rep.RetryAfterMs) * time.Millisecond
		w.Header().Set("Retry-After", retryAfterSeconds(ra))
		h.fail(w, "in_flight", http.StatusConflict, errorBody{Error: "in_flight", RetryAfterMs: max(1, rep.RetryAfterMs)})
		return
	case quota.ResultOK:
	default:
		h.log.Error("unknown hit result", "result", rep.Result)
		w.Header().Set("Retry-After", "1")
		h.fail(w, "store_unavailable", http.StatusServiceUnavailable, errorBody{Error: "store_unavailable"})
		return
	}
	h.setRemaining(w, rep)

	// Claims always live in the fleet store, also when the charges were
	// decided locally (see quota.Fleet): one winner per key.
	claimStore := h.cfg.Claims
	var id claims.ID
	if key != "" {
		h.m.claimOutcome.WithLabelValues("ok").Inc()
		id = claims.ID{Tenant: tenant, Source: source, Key: key}
	}

	// Store durably; only JetStream's ack makes a 2xx possible.
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.PublishTimeout)
	t1 := time.Now()
	_, err = h.cfg.Hooks.Store(pctx, Hook{
		ID: hookID, Tenant: tenant, Source: source, DedupeKey: key,
		ReceivedAt: start, ContentType: r.Header.Get("Content-Type"), Body: body,
	})
	h.m.pubLatency.Observe(time.Since(t1).Seconds())
	pcancel()
	if err != nil {
		h.log.Warn("hook not stored", "tenant", tenant, "source", source, "hook_id", hookID, "error", err)
		if key != "" {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.StoreTimeout)
			if rerr := claimStore.Release(rctx, id, hookID, rep.Revision); rerr != nil {
				// The pending claim then expires after its TTL.
				h.m.claimOutcome.WithLabelValues("release_failed").Inc()
				h.log.Warn("claim release failed", "hook_id", hookID, "error", rerr)
			} else {
				h.m.claimOutcome.WithLabelValues("released").Inc()
			}
			rcancel()
		}
		w.Header().Set("Retry-After", "1")
		h.fail(w, "store_unavailable", http.StatusServiceUnavailable, errorBody{Error: "store_unavailable"})
		return
	}
	if h.cfg.Lifecycle != nil {
		h.cfg.Lifecycle.HookStored(tenant, source, key, hookID)
	}
	if key != "" {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.StoreTimeout*4)
		// rep.Revision is our own claim's (the hit took it for hookID):
		// settle in one write.
		serr := claims.SettleOwn(sctx, claimStore, id, hookID, rep.Revision, h.cfg.DedupeTTL)
		scancel()
		if serr != nil {
			// The hook is durable: still 202 (at-least-once). The key may be
			// accepted once more after the pending claim expires.
			h.m.claimOutcome.WithLabelValues("settle_lost").Inc()
			h.log.Warn("settle failed after store; key may be accepted again", "hook_id", hookID, "error", serr)
		} else {
			h.m.claimOutcome.WithLabelValues("settled").Inc()
		}
	}
	w.Header().Set("X-Hook-Id", hookID)
	h.m.requests.WithLabelValues("accepted", "202").Inc()
	h.log.Debug("hook accepted", "tenant", tenant, "source", source, "hook_id", hookID, "bytes", len(body), "elapsed", time.Since(start))
	writeJSON(w, http.StatusAccepted, acceptedBody{Status: "accepted", ID: hookID})
}

// replayCheck claims the verified message's (id, timestamp) so a captured
// request cannot be replayed. It writes the response and returns false when
// the request must stop here.
func (h *Handler) replayCheck(w http.ResponseWriter, ctx context.Context, tenant, source string, v Verified) bool {
	// Without a signed timestamp (GitHub) an exact replay cannot be told
	// from a genuine redelivery: dedupe answers both.
	if h.cfg.Replay == nil || v.MessageID == "" || v.Timestamp == 0 {
		return true
	}
	ns := tenant + "/" + source
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
	cctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	out, err := h.cfg.Replay.Claim(cctx, ns, key, retain)
	cancel()
	if err != nil && errors.Is(err, claims.ErrUnavailable) && h.cfg.LocalReplay != nil {
		h.m.fallback.WithLabelValues("replay").Inc()
		out, err = h.cfg.LocalReplay.Claim(ctx, ns, key, retain)
	}
	if err != nil {
		h.m.replay.WithLabelValues("error").Inc()
		if errors.Is(err, claims.ErrInvalid) {
			h.fail(w, "verification_failed", http.StatusUnauthorized, errorBody{Error: "verification_failed"})
			return false
		}
		h.log.Warn("replay claim failed", "tenant", tenant, "error", err)
		w.Header().Set("Retry-After", "1")
		h.fail(w, "store_unavailable", http.StatusServiceUnavailable, errorBody{Error: "store_unavailable"})
		return false
	}
	h.m.replay.WithLabelValues(out.String()).Inc()
	switch out {
	case claims.Claimed:
		return true
	case claims.AlreadyClaimed:
		h.fail(w, "replay", http.StatusUnauthorized, errorBody{Error: "verification_failed"})
		return false
	default: // Full: we cannot remember the nonce, so we cannot accept it safely.
		h.log.Warn("replay store full")
		w.Header().Set("Retry-After", "1")
		h.fail(w, "store_unavailable", http.StatusServiceUnavailable, errorBody{Error: "store_unavailable"})
		return false
	}
}

// setPolicyHeaders writes RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers).
func setPolicyHeaders(w http.ResponseWriter, l Limits, hooks gcra.Limit) {
	bw := int64(1)
	if l.Bytes.Rate > 0 {
		bw = max(1, int64(math.Ceil(float64(l.Bytes.Burst)/l.Bytes.Rate)))
	}
	w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"hooks";q=%d;w=%d, "bytes";q=%d;qu="content-bytes";w=%d`,
		hooks.Burst(), gcra.CeilSeconds(hooks.Window()), l.Bytes.Burst, bw))
}

func (h *Handler) setRemaining(w http.ResponseWriter, rep quota.HitReply) {
	for _, ls := range rep.Limits {
		if ls.Kind == quota.KindHooks {
			t := int64(math.Ceil(float64(ls.ResetAfterMs) / 1000))
			w.Header().Set("RateLimit", fmt.Sprintf(`"hooks";r=%d;t=%d`, ls.Remaining, t))
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// bearer extracts a bearer token.
func bearer(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}
