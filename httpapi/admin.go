package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
)

// mountAdmin registers the admin API. Without an admin token every admin
// path answers 404 (the API does not exist); with one, a request without the
// right bearer token answers 401.
func (h *Handler) mountAdmin() {
	notFound := h.admin("other", func(w http.ResponseWriter, r *http.Request) {
		protocol.NotFound.Write(w, nil)
	})
	h.mux.HandleFunc("/v1/admin/", notFound)
	h.mux.HandleFunc("/v1/admin", notFound) // no redirect to the subtree
	h.mux.HandleFunc("GET /v1/admin/tenants/{tenant}/limits", h.admin("get_limits", h.getLimits))
	h.mux.HandleFunc("PUT /v1/admin/tenants/{tenant}/limits", h.admin("put_limits", h.putLimits))
	h.mux.HandleFunc("DELETE /v1/admin/tenants/{tenant}/limits", h.admin("delete_limits", h.deleteLimits))
	h.mux.HandleFunc("GET /v1/admin/claims/{tenant}/{source}/{key...}", h.admin("get_claim", h.getClaim))
	h.mux.HandleFunc("GET /v1/admin/hooks/{tenant}/{source}/{key...}", h.admin("get_receipt", h.getReceipt))
	h.mux.HandleFunc("GET /v1/admin/hooks/{tenant}/{source}", h.admin("get_receipt", h.getReceipt))
	h.mux.HandleFunc("POST /v1/admin/hooks/{tenant}/rewind", h.admin("rewind", h.postRewind))
	h.mux.HandleFunc("GET /v1/admin/consumers/{tenant}", h.admin("list_consumers", h.consumerOp(false, listConsumers)))
	h.mux.HandleFunc("GET /v1/admin/consumers/{tenant}/{name}", h.admin("get_consumer", h.consumerOp(true, getConsumer)))
	h.mux.HandleFunc("PUT /v1/admin/consumers/{tenant}/{name}", h.admin("put_consumer", h.consumerOp(true, h.putConsumer)))
	h.mux.HandleFunc("DELETE /v1/admin/consumers/{tenant}/{name}", h.admin("delete_consumer", h.consumerOp(true, h.deleteConsumer)))
	if hs, ok := h.cfg.Hooks.(*hooks.HookStore); ok && !hs.Outbox() {
		h.mux.HandleFunc("GET /v1/admin/consumers/{tenant}/{name}/dead", h.admin("list_dead", h.consumerOp(true, listDead)))
		h.mux.HandleFunc("DELETE /v1/admin/consumers/{tenant}/{name}/dead", h.admin("purge_dead", h.consumerOp(true, purgeDead)))
		h.mux.HandleFunc("GET /v1/admin/consumers/{tenant}/{name}/dead/{seq}", h.admin("get_dead", h.consumerOp(true, getDead)))
		h.mux.HandleFunc("POST /v1/admin/consumers/{tenant}/{name}/dead/{seq}/redrive", h.admin("redrive_dead", h.consumerOp(true, h.redriveDead)))
	}
	for _, r := range h.cfg.AdminRoutes {
		h.mux.HandleFunc(r.Pattern, h.admin(r.Op, r.Handler))
	}
}

// tokenEqual compares tokens in constant time (hashing first so the length
// of the configured token does not leak either).
func tokenEqual(got, want string) bool {
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// admin wraps an admin handler with the token check; op names the route in
// the metric (a fixed set: never the request's method or path).
func (h *Handler) admin(op string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.AdminToken == "" {
			protocol.NotFound.Write(w, nil)
			return
		}
		if !tokenEqual(bearer(r), h.cfg.AdminToken) {
			h.m.adminOps.WithLabelValues(op, "401").Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin"`)
			protocol.Unauthorized.Write(w, nil)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		next(rec, r)
		h.m.adminOps.WithLabelValues(op, statusLabel(rec.code)).Inc()
	}
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// pathTenant is the {tenant} of an admin path; an invalid one is answered
// 400 invalid_tenant (false).
func pathTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	tenant := r.PathValue("tenant")
	if !ValidName(tenant) {
		protocol.InvalidTenant.Write(w, nil)
		return "", false
	}
	return tenant, true
}

// overrideTenant is pathTenant for a request that changes an override:
// without an override store it is answered e (false).
func (h *Handler) overrideTenant(w http.ResponseWriter, r *http.Request, e protocol.Error) (string, bool) {
	tenant, ok := pathTenant(w, r)
	if ok && h.cfg.Overrides == nil {
		e.Write(w, nil)
		return "", false
	}
	return tenant, ok
}

type limitsReply struct {
	Tenant string `json:"tenant"`
	Limits
	Origin string `json:"origin"`
}

func (h *Handler) getLimits(w http.ResponseWriter, r *http.Request) {
	tenant, ok := pathTenant(w, r)
	if !ok {
		return
	}
	l, origin := h.EffectiveLimits(tenant)
	writeJSON(w, http.StatusOK, limitsReply{Tenant: tenant, Limits: l, Origin: origin})
}

// validRate decides by Rate.Validate (the rule the file and tenant records
// use too), naming the budget in its reason.
func validRate(name string, r Rate) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (h *Handler) putLimits(w http.ResponseWriter, r *http.Request) {
	tenant, ok := h.overrideTenant(w, r, protocol.StoreUnavailable)
	if !ok {
		return
	}
	var in struct {
		Hooks *Rate `json:"hooks"`
		Bytes *Rate `json:"bytes"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || (in.Hooks == nil && in.Bytes == nil) {
		reason := "body must be {\"hooks\":{\"rate\":N,\"burst\":N},\"bytes\":{…}} with at least one of them"
		if err != nil {
			reason = err.Error()
		}
		protocol.InvalidRequest.Write(w, map[string]any{"reason": reason})
		return
	}
	// Fields left out keep their current effective value.
	cur, _ := h.EffectiveLimits(tenant)
	for _, f := range []struct {
		name    string
		in, cur *Rate
	}{{"hooks", in.Hooks, &cur.Hooks}, {"bytes", in.Bytes, &cur.Bytes}} {
		if f.in == nil {
			continue
		}
		if err := validRate(f.name, *f.in); err != nil {
			protocol.InvalidRequest.Write(w, map[string]any{"reason": err.Error()})
			return
		}
		*f.cur = *f.in
	}
	ctx, cancel := context.WithTimeout(r.Context(), 4*h.cfg.StoreTimeout)
	defer cancel()
	if err := h.cfg.Overrides.Set(ctx, tenant, cur); err != nil {
		h.log.Warn("admin: storing override failed", "tenant", tenant, "error", err)
		protocol.StoreUnavailable.Write(w, nil)
		return
	}
	h.resetTenant(ctx, tenant)
	writeJSON(w, http.StatusOK, limitsReply{Tenant: tenant, Limits: cur, Origin: OriginOverride})
}

func (h *Handler) resetTenant(ctx context.Context, tenant string) {
	if h.cfg.Resetter == nil {
		return
	}
	if err := h.cfg.Resetter.Reset(ctx, tenant); err != nil {
		h.log.Warn("admin: resetting buckets failed", "tenant", tenant, "error", err)
	}
}

func (h *Handler) deleteLimits(w http.ResponseWriter, r *http.Request) {
	tenant, ok := h.overrideTenant(w, r, protocol.NotFound)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 4*h.cfg.StoreTimeout)
	defer cancel()
	had, err := h.cfg.Overrides.Delete(ctx, tenant)
	if err != nil {
		protocol.StoreUnavailable.Write(w, nil)
		return
	}
	if !had {
		protocol.NotFound.Write(w, nil)
		return
	}
	h.resetTenant(ctx, tenant)
	l, origin := h.EffectiveLimits(tenant)
	writeJSON(w, http.StatusOK, limitsReply{Tenant: tenant, Limits: l, Origin: origin})
}

func (h *Handler) getClaim(w http.ResponseWriter, r *http.Request) {
	tenant, ok := pathTenant(w, r)
	if !ok {
		return
	}
	source, key := r.PathValue("source"), r.PathValue("key")
	if !ValidName(source) {
		protocol.InvalidSource.Write(w, nil)
		return
	}
	if key == "" {
		protocol.InvalidRequest.Write(w, nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 4*h.cfg.StoreTimeout)
	defer cancel()
	st, err := h.cfg.Claims.Get(ctx, claims.ID{Tenant: tenant, Source: source, Key: claims.NormalizeKey(key)})
	if err != nil {
		if errors.Is(err, protocol.ErrInvalid) {
			protocol.InvalidRequest.Write(w, nil)
			return
		}
		protocol.StoreUnavailable.Write(w, nil)
		return
	}
	out := map[string]any{"state": st.State}
	if st.State != protocol.StateAbsent {
		out["hook_id"] = st.HookID
		out["expires_in_ms"] = st.ExpiresIn.Milliseconds()
		out["revision"] = st.Revision
	}
	writeJSON(w, http.StatusOK, out)
}
