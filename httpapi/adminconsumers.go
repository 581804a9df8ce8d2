package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
)

// consumerOpFunc is one operation of consumerOp: its status and value,
// or its error.
type consumerOpFunc func(ctx context.Context, hs *hooks.HookStore, r *http.Request, tenant, name string) (int, any, error)

// consumerOp is an admin handler of managed consumers: the {tenant} (and,
// named, the {name}) of the path checked (400), the node's hook store
// found (404 when it has none), then op's answer — its status and value, or its error mapped
// by writeConsumerErr.
func (h *Handler) consumerOp(named bool, op consumerOpFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := pathTenant(w, r)
		if !ok {
			return
		}
		name := r.PathValue("name")
		if named && !protocol.ValidConsumerName(name) {
			protocol.InvalidRequest.Write(w, map[string]any{"reason": "consumer name must be 1..64 bytes of [A-Za-z0-9_-]"})
			return
		}
		hs, ok := h.hookStore(w)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		code, v, err := op(ctx, hs, r, tenant, name)
		switch {
		case errors.Is(err, hooks.ErrConsumerNotFound):
			protocol.ConsumerNotFound.Write(w, nil)
		case errors.Is(err, errUnknownTenant):
			protocol.UnknownTenant.Write(w, nil)
		case errors.Is(err, hooks.ErrConsumerExists):
			protocol.ConsumerExists.Write(w, map[string]any{"reason": "created by another request meanwhile: PUT again to replace its settings"})
		case errors.Is(err, hooks.ErrDeadLetterNotFound):
			protocol.DeadLetterNotFound.Write(w, nil)
		case errors.Is(err, hooks.ErrConsumersOnHub):
			protocol.NotFound.Write(w, map[string]any{"reason": hooks.ErrConsumersOnHub.Error()})
		case errors.Is(err, hooks.ErrTooManyConsumers):
			protocol.TooManyConsumers.Write(w, map[string]any{"max": hooks.MaxTenantConsumers})
		case errors.Is(err, hooks.ErrConsumerConfig):
			protocol.InvalidRequest.Write(w, map[string]any{"reason": err.Error()})
		case err != nil:
			h.log.Warn("admin: managed consumer", "tenant", tenant, "consumer", name, "error", err)
			protocol.StoreUnavailable.Write(w, nil)
		case v == nil:
			w.WriteHeader(code)
		default:
			writeJSON(w, code, v)
		}
	}
}

// errUnknownTenant: a PUT of a consumer of a tenant the node does not
// know (Config.KnownTenant).
var errUnknownTenant = errors.New("httpapi: unknown tenant")

// putConsumer is PUT /v1/admin/consumers/{tenant}/{name}: 201 created,
// 200 replaced; 404 unknown_tenant for a tenant whose hooks the node
// refuses (a consumer of it would never get one).
func (h *Handler) putConsumer(ctx context.Context, hs *hooks.HookStore, r *http.Request, tenant, name string) (int, any, error) {
	if h.cfg.KnownTenant != nil && !h.cfg.KnownTenant(tenant) {
		return 0, nil, errUnknownTenant
	}
	var spec hooks.ConsumerSpec
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", hooks.ErrConsumerConfig, err)
	}
	if err := spec.Validate(); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", hooks.ErrConsumerConfig, err)
	}
	c, created, err := hs.PutConsumer(ctx, tenant, name, spec)
	if err != nil {
		return 0, nil, err
	}
	h.log.Info("admin: managed consumer stored", "tenant", tenant, "consumer", name, "created", created)
	if created {
		return http.StatusCreated, c, nil
	}
	return http.StatusOK, c, nil
}

// getConsumer is GET /v1/admin/consumers/{tenant}/{name}.
func getConsumer(ctx context.Context, hs *hooks.HookStore, _ *http.Request, tenant, name string) (int, any, error) {
	c, err := hs.GetConsumer(ctx, tenant, name)
	return http.StatusOK, c, err
}

// listConsumers is GET /v1/admin/consumers/{tenant}.
func listConsumers(ctx context.Context, hs *hooks.HookStore, _ *http.Request, tenant, _ string) (int, any, error) {
	cs, err := hs.ListConsumers(ctx, tenant)
	return http.StatusOK, map[string]any{"tenant": tenant, "consumers": cs}, err
}

// deleteConsumer is DELETE /v1/admin/consumers/{tenant}/{name}: 204.
func (h *Handler) deleteConsumer(ctx context.Context, hs *hooks.HookStore, _ *http.Request, tenant, name string) (int, any, error) {
	if err := hs.DeleteConsumer(ctx, tenant, name); err != nil {
		return 0, nil, err
	}
	h.log.Info("admin: managed consumer deleted", "tenant", tenant, "consumer", name)
	return http.StatusNoContent, nil, nil
}

// seqOf is the {seq} of the path: a dead letter's sequence.
func seqOf(r *http.Request) (uint64, error) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("%w: seq must be a dead letter's sequence", hooks.ErrConsumerConfig)
	}
	return seq, nil
}

// listDead is GET /v1/admin/consumers/{tenant}/{name}/dead?after=SEQ: up
// to hooks.MaxDeadLetterList dead letters from after SEQ.
func listDead(ctx context.Context, hs *hooks.HookStore, r *http.Request, tenant, name string) (int, any, error) {
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	out, next, err := hs.ListDead(ctx, tenant, name, after)
	if err != nil {
		return 0, nil, err
	}
	body := map[string]any{"tenant": tenant, "consumer": name, "dead_letters": out}
	if next != 0 {
		body["next"] = next
	}
	return http.StatusOK, body, nil
}

// purgeDead is DELETE /v1/admin/consumers/{tenant}/{name}/dead: every
// dead letter of the consumer deleted (204).
func purgeDead(ctx context.Context, hs *hooks.HookStore, _ *http.Request, tenant, name string) (int, any, error) {
	if err := hs.PurgeDead(ctx, tenant, name); err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// getDead is GET /v1/admin/consumers/{tenant}/{name}/dead/{seq}: the
// letter, with the hook's body (base64) and headers.
func getDead(ctx context.Context, hs *hooks.HookStore, r *http.Request, tenant, name string) (int, any, error) {
	seq, err := seqOf(r)
	if err != nil {
		return 0, nil, err
	}
	d, hdr, body, err := hs.GetDead(ctx, tenant, name, seq)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"dead_letter": d, "headers": hdr, "body": body}, nil
}

// redriveDead is POST /v1/admin/consumers/{tenant}/{name}/dead/{seq}/redrive
// (hooks.HookStore.RedriveDead, waiting for the node's barrier Config.Sync):
// a failed barrier answers 503 and keeps the letter.
func (h *Handler) redriveDead(ctx context.Context, hs *hooks.HookStore, r *http.Request, tenant, name string) (int, any, error) {
	seq, err := seqOf(r)
	if err != nil {
		return 0, nil, err
	}
	d, stream, stored, err := hs.RedriveDead(ctx, h.cfg.Sync, tenant, name, seq)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"redriven": d, "stream": stream, "stream_seq": stored}, nil
}

// hookStore is the node's own hook store for an admin route, or false
// after answering 404 (a store of another kind: a leaf keeps no hooks
// stream of its own to manage).
func (h *Handler) hookStore(w http.ResponseWriter) (*hooks.HookStore, bool) {
	hs, ok := h.cfg.Hooks.(*hooks.HookStore)
	if !ok {
		protocol.NotFound.Write(w, nil)
	}
	return hs, ok
}
