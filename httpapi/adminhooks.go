package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
)

// postRewind is POST /v1/admin/hooks/{tenant}/rewind.
func (h *Handler) postRewind(w http.ResponseWriter, r *http.Request) {
	tenant, ok := pathTenant(w, r)
	if !ok {
		return
	}
	bad := func(reason string) {
		protocol.InvalidRequest.Write(w, map[string]any{"reason": reason})
	}
	hs, ok := h.hookStore(w)
	if !ok {
		return
	}
	var in struct {
		Consumer    string     `json:"consumer"`
		Durable     bool       `json:"durable"`
		Sources     []string   `json:"sources"`
		Types       []string   `json:"types"`
		Since       *time.Time `json:"since"`
		StartHookID string     `json:"start_hook_id"`
		Paced       bool       `json:"paced"`
		// Push (redelivery): JetStream delivers to DeliverSubject.
		DeliverSubject string `json:"deliver_subject"`
		MaxInFlight    int    `json:"max_in_flight"`
		RateBPS        uint64 `json:"rate_bps"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		bad(err.Error())
		return
	}
	switch {
	case !protocol.ValidConsumerName(in.Consumer):
		bad("consumer must be 1..64 bytes of [A-Za-z0-9_-]")
		return
	case len(in.Sources) > hooks.MaxRewindSources || len(in.Types) > hooks.MaxRewindTypes:
		bad("at most 16 sources and 16 types")
		return
	case len(in.Types) > 0 && len(in.Sources) == 0:
		bad("types need sources")
		return
	case in.Since != nil && in.StartHookID != "":
		bad("give since or start_hook_id, not both")
		return
	case in.StartHookID != "" && len(in.Sources) == 0:
		bad("start_hook_id needs sources")
		return
	case in.MaxInFlight < 0 || in.MaxInFlight > hooks.MaxPushInFlight:
		bad("max_in_flight must be 1..1024")
		return
	case in.RateBPS > 0 && in.DeliverSubject == "":
		bad("rate_bps needs deliver_subject")
		return
	}
	for _, s := range in.Sources {
		if !ValidName(s) {
			protocol.InvalidSource.Write(w, nil)
			return
		}
	}
	for _, t := range in.Types {
		if t == "" || len(t) > 64 {
			bad("types must be 1..64 bytes")
			return
		}
	}
	spec := hooks.RewindSpec{Tenant: tenant, Sources: in.Sources, Types: in.Types, Consumer: in.Consumer, Durable: in.Durable, Paced: in.Paced,
		DeliverSubject: in.DeliverSubject, MaxInFlight: in.MaxInFlight, RateBPS: in.RateBPS}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if in.Since != nil {
		spec.Since = *in.Since
	}
	if in.StartHookID != "" {
		for _, src := range in.Sources {
			rec, err := hs.Find(ctx, tenant, src, in.StartHookID, time.Time{})
			if err == nil {
				spec.StartSeq = rec.Seq
				break
			}
			if !errors.Is(err, hooks.ErrReceiptNotFound) {
				protocol.StoreUnavailable.Write(w, nil)
				return
			}
		}
		if spec.StartSeq == 0 {
			protocol.NotFound.Write(w, map[string]any{"reason": "start_hook_id is not in the stream"})
			return
		}
	}
	res, err := hs.Rewind(ctx, spec)
	switch {
	case errors.Is(err, hooks.ErrConsumerExists):
		protocol.ConsumerExists.Write(w, nil)
	case errors.Is(err, hooks.ErrDeliverSubject):
		bad(err.Error())
	case err != nil:
		h.log.Warn("admin: rewind failed", "tenant", tenant, "error", err)
		protocol.StoreUnavailable.Write(w, nil)
	default:
		if len(in.Types) > 0 {
			for _, src := range in.Sources {
				if s, err := h.cfg.Policy.Source(tenant, src); err == nil && s.EventType == nil {
					res.Warnings = append(res.Warnings, "source "+src+" has no event_type: its hooks are stored without a type, so types match none of them (drop types, or set event_type on the source for hooks from now on)")
				}
			}
		}
		h.log.Info("admin: rewind consumer created", "tenant", tenant, "consumer", res.Consumer, "pending", res.NumPending, "warnings", len(res.Warnings))
		writeJSON(w, http.StatusCreated, res)
	}
}

// receiptSlack widens a receipt's scan window for clock skew and the time
// between receipt and settle.
const receiptSlack = time.Minute

// getReceipt is GET /v1/admin/hooks/{tenant}/{source}/{key...} (did the
// provider's event with this dedupe key arrive: the claim and the stored
// message; also ?key=K for a key with '/') and GET
// /v1/admin/hooks/{tenant}/{source}?hook_id=ID.
func (h *Handler) getReceipt(w http.ResponseWriter, r *http.Request) {
	tenant, source, key := r.PathValue("tenant"), r.PathValue("source"), r.PathValue("key")
	hookID := r.URL.Query().Get("hook_id")
	qkey := r.URL.Query().Get("key") // a key with '/', which a path cannot carry (%2F is refused)
	switch {
	case qkey != "" && key != "":
		protocol.InvalidRequest.Write(w, map[string]any{"reason": "give the key once"})
		return
	case qkey != "":
		key = qkey
	}
	switch {
	case !ValidName(tenant):
		protocol.InvalidTenant.Write(w, nil)
		return
	case !ValidName(source):
		protocol.InvalidSource.Write(w, nil)
		return
	case (key == "") == (hookID == "") || len(hookID) > 128:
		protocol.InvalidRequest.Write(w, map[string]any{"reason": "give a dedupe key in the path or ?hook_id="})
		return
	}
	hs, ok := h.hookStore(w)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	out := map[string]any{"tenant": tenant, "source": source}
	var since time.Time
	if key != "" {
		out["key"] = key
		st, err := h.cfg.Claims.Get(ctx, claims.ID{Tenant: tenant, Source: source, Key: claims.NormalizeKey(key)})
		switch {
		case errors.Is(err, protocol.ErrInvalid):
			protocol.InvalidRequest.Write(w, map[string]any{"reason": err.Error()})
			return
		case err != nil:
			protocol.StoreUnavailable.Write(w, nil)
			return
		case st.State == protocol.StateAbsent:
			protocol.NotFound.Write(w, nil)
			return
		}
		hookID = st.HookID
		out["state"], out["hook_id"] = st.State, st.HookID
		// The claim was taken at most its TTL minus what is left of it ago.
		ttl := h.cfg.DedupeTTL
		if st.State == protocol.StatePending {
			ttl = h.cfg.PendingTTL
		}
		since = h.cfg.Now().Add(-(ttl - st.ExpiresIn) - receiptSlack)
	}
	rec, err := hs.Find(ctx, tenant, source, hookID, since)
	switch {
	case errors.Is(err, hooks.ErrReceiptNotFound) && key != "":
		out["stored"] = false // pending, or aged out of the stream
		writeJSON(w, http.StatusOK, out)
	case errors.Is(err, hooks.ErrReceiptNotFound):
		protocol.NotFound.Write(w, nil)
	case err != nil:
		h.log.Warn("admin: receipt lookup failed", "tenant", tenant, "error", err)
		protocol.StoreUnavailable.Write(w, nil)
	default:
		out["stored"], out["hook_id"], out["stream_seq"], out["subject"], out["received_at"] = true, rec.HookID, rec.Seq, rec.Subject, rec.ReceivedAt
		writeJSON(w, http.StatusOK, out)
	}
}
