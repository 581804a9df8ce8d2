package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/internal/names"
	"github.com/sluice-dev/sluice/protocol"
)

// Config holds a Handler's dependencies. Policy, Limits, Admitter, Claims
// and Hooks are required; the rest have defaults.
type Config struct {
	Policy    Policy
	Limits    LimitsFunc
	Overrides *Overrides // fleet-wide admin overrides (nil: none, admin PUT disabled)
	Admitter  Admitter
	Resetter  Resetter           // used by the admin API to reset buckets
	Claims    claims.Store       // the fleet (KV) claim store; the Admitter takes claims there too
	Replay    claims.ReplayStore // replay nonces (nil: no replay protection)
	Hooks     HookStorer
	// Sync is the durability barrier (nil: none, the JetStream ack is the
	// promise): a 2xx is sent only after Sync returned nil for the writes
	// it rests on (the stored hook and its settled claim; for a duplicate,
	// the hook it names). A failed Sync is 503 store_unavailable.
	Sync durability.Syncer
	// Durability names the level in force, shown in /readyz ("" : not
	// shown).
	Durability string
	Lifecycle  Lifecycle // lifecycle events (nil: none)
	// Tracer traces the hook path (nil: tracing off, at no cost): a span
	// per hook (a child of the sender's traceparent) with children verify,
	// hit, store and settle; the store span's context is the stored
	// message's traceparent header (tracing.FromEnv).
	Tracer trace.Tracer

	PendingTTL     time.Duration // pending claim TTL (default 30 s)
	DedupeTTL      time.Duration // committed claim TTL (default 72 h)
	StoreTimeout   time.Duration // budget of one fleet call (default 250 ms)
	PublishTimeout time.Duration // budget of the durable publish (default 5 s)
	// MaxInFlight bounds the hooks served at once (default
	// protocol.DefaultMaxInFlightHooks): one more is answered 503 overloaded with
	// Retry-After at once, before its body is read, so that the work a
	// node starts can finish inside its budgets.
	MaxInFlight int

	// MaxPayload returns the NATS connection's max payload (nil: not
	// checked): a body over it minus hooks.OverheadBytes is answered 413.
	MaxPayload func() int64
	// TrustedProxies are the peers whose ClientIPHeader names the client
	// for sources' IPAllow (nil: the peer is the client). ClientIPHeader
	// defaults to X-Forwarded-For; the client is its rightmost address
	// that is not a trusted proxy.
	TrustedProxies []netip.Prefix
	ClientIPHeader string
	// VerifyFailures is each verifying source's budget of signature
	// checks that fail (default DefaultVerifyFailures); beyond it, 429
	// without checking.
	VerifyFailures Rate

	AdminToken  string       // enables the admin API when set
	AdminRoutes []AdminRoute // more admin routes (tenants), behind the token
	// KnownTenant reports whether the node accepts hooks of tenant (the
	// file lists it, it has a record, or admission is open to unknown
	// tenants); a managed consumer is created only for such a tenant
	// (else 404 unknown_tenant). Nil: every tenant.
	KnownTenant func(tenant string) bool
	Ready       func() error // readiness check for /readyz (nil: always ready)
	// Shards answers GET /v1/shards (a *ShardMap; nil: not served).
	Shards http.Handler
	// StoreFailed is nil while the node's store can write, else why not
	// (a full disk: the embedded JetStream does not write again before a
	// restart). A hook is then answered 503 store_unavailable at once,
	// nothing charged or claimed, instead of after its store timeout. Nil:
	// never failed.
	StoreFailed func() error
	// ReadyInfo, when set, is shown in /readyz's body as "leaf" whether
	// ready or not (a leaf's hub link and outbox backlog: a hub outage
	// leaves a leaf ready).
	ReadyInfo  func() any
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// AccessLog, when set, gets one info line "hook" per answered hook
	// (docs/OPERATIONS.md "Logs"); nil: no access log.
	AccessLog *slog.Logger
	Now       func() time.Time
	NewID     func() string
}

// HookStorer durably stores a hook (hooks.HookStore implements it). Any error
// means the hook is not durable.
type HookStorer interface {
	Store(ctx context.Context, h hooks.Hook) (uint64, error)
}

// Lifecycle receives lifecycle notifications (events.Publisher implements
// it). Implementations must not block.
type Lifecycle interface {
	HookStored(tenant, source, key, hookID string)
	LimitDenied(tenant, source, kind string, retryAfter time.Duration)
}

// DefaultVerifyFailures returns the default budget of failed signature checks of
// one source: 10 per second with bursts of 100.
func DefaultVerifyFailures() Rate { return Rate{Rate: 10, Burst: 100} }

// maxFailureKeys bounds the sources tracked by the verification-failure
// limiter.
const maxFailureKeys = 100_000

// Handler serves the edge's HTTP API.
type Handler struct {
	cfg Config
	mux *http.ServeMux
	m   *metrics
	log *slog.Logger

	failures  *gcra.Limiter // verification failures, by tenant/source
	failLimit gcra.Limit
	slots     chan struct{} // hooks in flight (Config.MaxInFlight)
}

// ErrInvalidConfig is wrapped by the error of Config.Validate, and so of
// New.
var ErrInvalidConfig = errors.New("httpapi: invalid config")

// Validate refuses a Config without a required dependency or with a
// negative TTL, timeout or bound; zero keeps the default.
func (cfg *Config) Validate() error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrInvalidConfig, what) }
	switch {
	case cfg.Policy == nil:
		return bad("Policy is required")
	case cfg.Limits == nil:
		return bad("Limits is required")
	case cfg.Admitter == nil:
		return bad("Admitter is required")
	case cfg.Claims == nil:
		return bad("Claims is required")
	case cfg.Hooks == nil:
		return bad("Hooks is required")
	case cfg.PendingTTL < 0, cfg.DedupeTTL < 0, cfg.StoreTimeout < 0, cfg.PublishTimeout < 0, cfg.MaxInFlight < 0:
		return bad("negative TTL, timeout or max in flight")
	}
	return nil
}

// New validates cfg and returns a Handler. Errors: ErrInvalidConfig.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PendingTTL == 0 {
		cfg.PendingTTL = protocol.DefaultPendingTTL
	}
	if cfg.DedupeTTL == 0 {
		cfg.DedupeTTL = protocol.DefaultCommittedTTL
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = protocol.DefaultTimeout
	}
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = 5 * time.Second
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = protocol.DefaultMaxInFlightHooks
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
	if cfg.ClientIPHeader == "" {
		cfg.ClientIPHeader = "X-Forwarded-For"
	}
	if cfg.VerifyFailures == (Rate{}) {
		cfg.VerifyFailures = DefaultVerifyFailures()
	}
	failLimit, err := gcra.LimitFromRate(cfg.VerifyFailures.Rate, cfg.VerifyFailures.Burst)
	if err != nil {
		return nil, fmt.Errorf("httpapi: Config.VerifyFailures: %w", err)
	}
	failures, err := gcra.NewLimiter(gcra.WithMaxKeys(maxFailureKeys))
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	if err := registerReady(cfg.Registerer, cfg.Ready); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), m: m, log: cfg.Logger, failures: failures, failLimit: failLimit,
		slots: make(chan struct{}, cfg.MaxInFlight)}
	for _, m := range hookMethods {
		h.mux.HandleFunc(m+" /v1/hooks/{tenant}/{source}", h.serveHook)
	}
	h.mux.HandleFunc("/v1/hooks/{tenant}/{source}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "POST")
		protocol.MethodNotAllowed.Write(w, nil)
	})
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		protocol.NotFound.Write(w, nil)
	})
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	h.mux.HandleFunc("GET /readyz", h.serveReady)
	h.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	if cfg.Shards != nil {
		h.mux.Handle("GET /v1/shards", cfg.Shards)
	}
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
		protocol.InvalidRequest.Write(w, nil)
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
func tokenByte(c byte) bool { return names.NameByte(c) }

// ValidName reports whether s is a valid tenant or source: 1–128 bytes of
// [A-Za-z0-9._~-], and not "." or ".." (path segments no URL can carry).
func ValidName(s string) bool { return names.ValidName(s) }

func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"status": "ready"}
	if h.cfg.Durability != "" {
		body["durability"] = h.cfg.Durability
	}
	if h.cfg.ReadyInfo != nil {
		body["leaf"] = h.cfg.ReadyInfo()
	}
	if h.cfg.Ready != nil {
		if err := h.cfg.Ready(); err != nil {
			body["status"], body["reason"] = "not_ready", err.Error()
			writeJSON(w, http.StatusServiceUnavailable, body)
			return
		}
	}
	writeJSON(w, http.StatusOK, body)
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

// fail answers a hook refused with e (its HTTP status; body's error is
// e's code) and counts it.
func (h *Handler) fail(w http.ResponseWriter, outcome string, e protocol.Error, body errorBody) {
	body.Error = e.Code
	h.m.requests.WithLabelValues(outcome, strconv.Itoa(e.HTTP)).Inc()
	h.log.Debug("hook refused", "outcome", outcome, "status", e.HTTP, "request_id", w.Header().Get("X-Request-Id"))
	writeJSON(w, e.HTTP, body)
}

// retryAfterSeconds is the delta-seconds of Retry-After: rounded up, >= 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
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

func (h *Handler) setRemaining(w http.ResponseWriter, rep protocol.HitReply, hooksKind string) {
	for _, ls := range rep.Limits {
		if ls.Kind == hooksKind {
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
