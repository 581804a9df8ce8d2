package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Bounds of a managed consumer (docs/PROTOCOL.md "Managed consumers").
const (
	// MaxTenantConsumers bounds a tenant's managed consumers.
	MaxTenantConsumers = 16
	// MaxConsumerDeliver bounds max_deliver (0: unlimited).
	MaxConsumerDeliver = 1000
	// MaxConsumerBackoff bounds the steps of backoff_ms.
	MaxConsumerBackoff = 16
	// DefaultConsumerAckWait is the ack wait of a consumer given none.
	DefaultConsumerAckWait = 30 * time.Second
	// MinConsumerAckWait is the shortest ack wait (and backoff step).
	MinConsumerAckWait = time.Second
)

// Metadata keys of a managed consumer's JetStream config.
const (
	metaTenant  = "sluice_tenant"
	metaSources = "sluice_sources"
	metaTypes   = "sluice_types"
)

// ConsumerSpec is what an operator sets of a managed consumer.
type ConsumerSpec struct {
	Sources     []string `json:"sources,omitempty"`
	Types       []string `json:"types,omitempty"`
	MaxDeliver  int      `json:"max_deliver"` // 0: unlimited
	AckWaitMS   int64    `json:"ack_wait_ms"`
	BackoffMS   []int64  `json:"backoff_ms,omitempty"`
	MaxInFlight int      `json:"max_in_flight"`
	// DeliverNew starts a new consumer at the hooks stored from now on
	// (else at the tenant's oldest stored hook); ignored by an update.
	DeliverNew bool `json:"deliver_new,omitempty"`
}

// ManagedConsumer is a managed consumer as the admin API shows it.
type ManagedConsumer struct {
	Tenant         string   `json:"tenant"`
	Name           string   `json:"name"`
	Stream         string   `json:"stream"`
	Consumer       string   `json:"consumer"`        // the JetStream name
	DeliverSubject string   `json:"deliver_subject"` // subscribe here…
	DeliverGroup   string   `json:"deliver_group"`   // …in this queue group
	FilterSubjects []string `json:"filter_subjects"`
	ConsumerSpec
	NumPending     uint64 `json:"num_pending"`
	NumAckPending  int    `json:"num_ack_pending"`
	NumRedelivered int    `json:"num_redelivered"`
}

// ErrConsumerNotFound and ErrTooManyConsumers are ConsumerManager's
// errors; ErrConsumerConfig wraps JetStream's refusal of a configuration.
var (
	ErrConsumerNotFound = errors.New("httpapi: no such managed consumer")
	ErrTooManyConsumers = errors.New("httpapi: the tenant has its maximum of managed consumers")
	ErrConsumerConfig   = errors.New("httpapi: consumer configuration refused")
	// ErrConsumersOnHub: a leaf's store keeps its hooks in an outbox until
	// the hub has them; a tenant's consumers live on the hub.
	ErrConsumersOnHub = errors.New("httpapi: a leaf keeps no hooks stream: manage consumers on the hub")
)

// ConsumerManager keeps managed consumers (HookStore implements it).
type ConsumerManager interface {
	// PutConsumer creates (created true) or replaces a tenant's consumer.
	PutConsumer(ctx context.Context, tenant, name string, spec ConsumerSpec) (c ManagedConsumer, created bool, err error)
	GetConsumer(ctx context.Context, tenant, name string) (ManagedConsumer, error)
	ListConsumers(ctx context.Context, tenant string) ([]ManagedConsumer, error)
	DeleteConsumer(ctx context.Context, tenant, name string) error
}

// validate checks spec as the admin API does; the error is the reason.
func (spec ConsumerSpec) validate() error {
	switch {
	case len(spec.Sources) > MaxRewindSources || len(spec.Types) > MaxRewindTypes:
		return fmt.Errorf("at most %d sources and %d types", MaxRewindSources, MaxRewindTypes)
	case len(spec.Types) > 0 && len(spec.Sources) == 0:
		return errors.New("types need sources")
	case spec.MaxDeliver < 0 || spec.MaxDeliver > MaxConsumerDeliver:
		return fmt.Errorf("max_deliver must be 0 (unlimited) or 1..%d", MaxConsumerDeliver)
	case spec.AckWaitMS != 0 && !validWait(spec.AckWaitMS):
		return fmt.Errorf("ack_wait_ms must be %d..%d", MinConsumerAckWait.Milliseconds(), authz.MaxAckWait.Milliseconds())
	case len(spec.BackoffMS) > MaxConsumerBackoff:
		return fmt.Errorf("at most %d backoff_ms steps", MaxConsumerBackoff)
	case len(spec.BackoffMS) > 0 && (spec.MaxDeliver == 0 || spec.MaxDeliver <= len(spec.BackoffMS)):
		return errors.New("backoff_ms needs a max_deliver above its number of steps")
	case len(spec.BackoffMS) > 0 && spec.AckWaitMS != 0 && spec.AckWaitMS != spec.BackoffMS[0]:
		// JetStream's rule: with a backoff, the ack wait is its first
		// step. Another would be replaced without a word.
		return fmt.Errorf("ack_wait_ms %d with backoff_ms: a consumer with a backoff waits its first step (%d ms) for an ack; give no ack_wait_ms or that step", spec.AckWaitMS, spec.BackoffMS[0])
	case spec.MaxInFlight < 0 || spec.MaxInFlight > MaxPushInFlight:
		return fmt.Errorf("max_in_flight must be 1..%d", MaxPushInFlight)
	}
	for _, b := range spec.BackoffMS {
		if !validWait(b) {
			return fmt.Errorf("each backoff_ms step must be %d..%d", MinConsumerAckWait.Milliseconds(), authz.MaxAckWait.Milliseconds())
		}
	}
	for _, s := range spec.Sources {
		if !ValidName(s) {
			return fmt.Errorf("source %q is not a valid name", s)
		}
	}
	for _, t := range spec.Types {
		if t == "" || len(t) > 64 {
			return errors.New("types must be 1..64 bytes")
		}
	}
	return nil
}

// validWait: an ack wait or backoff step the consumer role can answer in
// (authz.ConsumerResponses() expires after authz.MaxAckWait).
func validWait(ms int64) bool {
	return ms >= MinConsumerAckWait.Milliseconds() && ms <= authz.MaxAckWait.Milliseconds()
}

// consumerConfig is the JetStream configuration of tenant's consumer name.
func (s *HookStore) consumerConfig(tenant, name string, spec ConsumerSpec) jetstream.ConsumerConfig {
	jsName := protocol.ManagedConsumer(tenant, name)
	cfg := jetstream.ConsumerConfig{
		Name:           jsName,
		Durable:        jsName,
		Description:    "sluice managed consumer " + name + " of tenant " + tenant,
		FilterSubjects: rewindFilters(s.prefix, RewindSpec{Tenant: tenant, Sources: spec.Sources, Types: spec.Types}),
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		DeliverSubject: protocol.ConsumerDeliverSubject(s.prefix, tenant, name),
		DeliverGroup:   name,
		AckWait:        DefaultConsumerAckWait,
		MaxDeliver:     -1,
		MaxAckPending:  DefaultPushInFlight,
		Metadata: map[string]string{
			metaTenant:  tenant,
			metaSources: strings.Join(spec.Sources, ","),
			metaTypes:   strings.Join(spec.Types, "\n"),
		},
	}
	if spec.DeliverNew {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	if spec.AckWaitMS > 0 {
		cfg.AckWait = time.Duration(spec.AckWaitMS) * time.Millisecond
	}
	if spec.MaxDeliver > 0 {
		cfg.MaxDeliver = spec.MaxDeliver
	}
	for _, b := range spec.BackoffMS {
		cfg.BackOff = append(cfg.BackOff, time.Duration(b)*time.Millisecond)
	}
	if spec.MaxInFlight > 0 {
		cfg.MaxAckPending = spec.MaxInFlight
	}
	return cfg
}

// managedOf is the admin API's view of a managed consumer's info.
func managedOf(stream string, info *jetstream.ConsumerInfo) (ManagedConsumer, bool) {
	_, name, ok := protocol.ManagedConsumerName(info.Name)
	tenant := info.Config.Metadata[metaTenant]
	if !ok || tenant == "" || protocol.ManagedConsumer(tenant, name) != info.Name {
		return ManagedConsumer{}, false
	}
	c := info.Config
	m := ManagedConsumer{Tenant: tenant, Name: name, Stream: stream, Consumer: info.Name,
		DeliverSubject: c.DeliverSubject, DeliverGroup: c.DeliverGroup, FilterSubjects: c.FilterSubjects,
		NumPending: info.NumPending, NumAckPending: info.NumAckPending, NumRedelivered: info.NumRedelivered}
	if c.FilterSubject != "" {
		m.FilterSubjects = []string{c.FilterSubject}
	}
	if v := c.Metadata[metaSources]; v != "" {
		m.Sources = strings.Split(v, ",")
	}
	if v := c.Metadata[metaTypes]; v != "" {
		m.Types = strings.Split(v, "\n")
	}
	if c.MaxDeliver > 0 {
		m.MaxDeliver = c.MaxDeliver
	}
	m.AckWaitMS = c.AckWait.Milliseconds()
	for _, b := range c.BackOff {
		m.BackoffMS = append(m.BackoffMS, b.Milliseconds())
	}
	m.MaxInFlight = c.MaxAckPending
	m.DeliverNew = c.DeliverPolicy == jetstream.DeliverNewPolicy
	return m, true
}

// consumerErr maps a JetStream error of a managed consumer.
func consumerErr(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return ErrConsumerNotFound
	case errors.Is(err, jetstream.ErrNotPushConsumer):
		// A pull consumer under a managed name, made with the node role.
		return fmt.Errorf("%w: the name is taken by a consumer sluice does not manage", ErrConsumerConfig)
	case errors.As(err, &apiErr) && apiErr.Code == http.StatusBadRequest:
		return fmt.Errorf("%w: %s", ErrConsumerConfig, apiErr.Description)
	}
	return kvstore.MapError(err)
}

// PutConsumer implements ConsumerManager.
func (s *HookStore) PutConsumer(ctx context.Context, tenant, name string, spec ConsumerSpec) (ManagedConsumer, bool, error) {
	if s.outbox {
		return ManagedConsumer{}, false, ErrConsumersOnHub
	}
	stream := s.streamOf(tenant)
	cfg := s.consumerConfig(tenant, name, spec)
	old, err := s.js.PushConsumer(ctx, stream, cfg.Name)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return ManagedConsumer{}, false, consumerErr(err)
	}
	created := old == nil
	var info *jetstream.ConsumerInfo
	if created {
		all, err := s.ListConsumers(ctx, tenant)
		if err != nil {
			return ManagedConsumer{}, false, err
		}
		if len(all) >= MaxTenantConsumers {
			return ManagedConsumer{}, false, ErrTooManyConsumers
		}
		var c jetstream.PushConsumer
		if c, err = s.js.CreatePushConsumer(ctx, stream, cfg); err == nil {
			info, err = c.Info(ctx)
		}
		if errors.Is(err, jetstream.ErrConsumerExists) {
			// Created by another request since: that one's spec stands.
			return ManagedConsumer{}, false, ErrConsumerExists
		}
		if err != nil {
			return ManagedConsumer{}, false, consumerErr(err)
		}
	} else {
		// The start of a consumer is fixed at its creation.
		cfg.DeliverPolicy = old.CachedInfo().Config.DeliverPolicy
		var c jetstream.PushConsumer
		if c, err = s.js.UpdatePushConsumer(ctx, stream, cfg); err == nil {
			info, err = c.Info(ctx)
		}
		if err != nil {
			return ManagedConsumer{}, false, consumerErr(err)
		}
	}
	// The tenant's readers read its dead letters through one consumer of
	// DEADLETTER, there from its first managed consumer on.
	if err := s.ensureDeadReader(ctx, tenant); err != nil {
		return ManagedConsumer{}, false, err
	}
	m, _ := managedOf(stream, info)
	return m, created, nil
}

// GetConsumer implements ConsumerManager.
func (s *HookStore) GetConsumer(ctx context.Context, tenant, name string) (ManagedConsumer, error) {
	if s.outbox {
		return ManagedConsumer{}, ErrConsumersOnHub
	}
	stream := s.streamOf(tenant)
	c, err := s.js.PushConsumer(ctx, stream, protocol.ManagedConsumer(tenant, name))
	if err != nil {
		return ManagedConsumer{}, consumerErr(err)
	}
	m, ok := managedOf(stream, c.CachedInfo())
	if !ok || m.Tenant != tenant {
		return ManagedConsumer{}, ErrConsumerNotFound
	}
	return m, nil
}

// ListConsumers implements ConsumerManager: the tenant's consumers by
// name (a stream's consumer listing, filtered by the tenant's prefix).
func (s *HookStore) ListConsumers(ctx context.Context, tenant string) ([]ManagedConsumer, error) {
	if s.outbox {
		return nil, ErrConsumersOnHub
	}
	stream := s.streamOf(tenant)
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		return nil, kvstore.MapError(err)
	}
	prefix := protocol.TenantToken(tenant) + protocol.ConsumerSep
	out := []ManagedConsumer{}
	l := st.ListConsumers(ctx)
	for info := range l.Info() {
		if !strings.HasPrefix(info.Name, prefix) {
			continue
		}
		if m, ok := managedOf(stream, info); ok && m.Tenant == tenant {
			out = append(out, m)
		}
	}
	if err := l.Err(); err != nil {
		return nil, kvstore.MapError(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// DeleteConsumer implements ConsumerManager.
func (s *HookStore) DeleteConsumer(ctx context.Context, tenant, name string) error {
	if s.outbox {
		return ErrConsumersOnHub
	}
	if _, err := s.GetConsumer(ctx, tenant, name); err != nil {
		return err
	}
	return consumerErr(s.js.DeleteConsumer(ctx, s.streamOf(tenant), protocol.ManagedConsumer(tenant, name)))
}

// consumerOp is an admin handler of managed consumers: the {tenant} (and,
// named, the {name}) of the path checked (400), the node's
// ConsumerManager found (404 when it has none: a leaf keeps no hooks
// stream), then op's answer — its status and value, or its error mapped
// by writeConsumerErr.
func (h *Handler) consumerOp(named bool, op func(ctx context.Context, cm ConsumerManager, r *http.Request, tenant, name string) (int, any, error)) http.HandlerFunc {
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
		cm, ok := h.cfg.Hooks.(ConsumerManager)
		if !ok {
			protocol.NotFound.Write(w, nil)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		code, v, err := op(ctx, cm, r, tenant, name)
		switch {
		case errors.Is(err, ErrConsumerNotFound):
			protocol.ConsumerNotFound.Write(w, nil)
		case errors.Is(err, errUnknownTenant):
			protocol.UnknownTenant.Write(w, nil)
		case errors.Is(err, ErrConsumerExists):
			protocol.ConsumerExists.Write(w, map[string]any{"reason": "created by another request meanwhile: PUT again to replace its settings"})
		case errors.Is(err, ErrDeadLetterNotFound):
			protocol.DeadLetterNotFound.Write(w, nil)
		case errors.Is(err, ErrConsumersOnHub):
			protocol.NotFound.Write(w, map[string]any{"reason": ErrConsumersOnHub.Error()})
		case errors.Is(err, ErrTooManyConsumers):
			protocol.TooManyConsumers.Write(w, map[string]any{"max": MaxTenantConsumers})
		case errors.Is(err, ErrConsumerConfig):
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
func (h *Handler) putConsumer(ctx context.Context, cm ConsumerManager, r *http.Request, tenant, name string) (int, any, error) {
	if h.cfg.KnownTenant != nil && !h.cfg.KnownTenant(tenant) {
		return 0, nil, errUnknownTenant
	}
	var spec ConsumerSpec
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrConsumerConfig, err)
	}
	if err := spec.validate(); err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrConsumerConfig, err)
	}
	c, created, err := cm.PutConsumer(ctx, tenant, name, spec)
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
func getConsumer(ctx context.Context, cm ConsumerManager, _ *http.Request, tenant, name string) (int, any, error) {
	c, err := cm.GetConsumer(ctx, tenant, name)
	return http.StatusOK, c, err
}

// listConsumers is GET /v1/admin/consumers/{tenant}.
func listConsumers(ctx context.Context, cm ConsumerManager, _ *http.Request, tenant, _ string) (int, any, error) {
	cs, err := cm.ListConsumers(ctx, tenant)
	return http.StatusOK, map[string]any{"tenant": tenant, "consumers": cs}, err
}

// deleteConsumer is DELETE /v1/admin/consumers/{tenant}/{name}: 204.
func (h *Handler) deleteConsumer(ctx context.Context, cm ConsumerManager, _ *http.Request, tenant, name string) (int, any, error) {
	if err := cm.DeleteConsumer(ctx, tenant, name); err != nil {
		return 0, nil, err
	}
	h.log.Info("admin: managed consumer deleted", "tenant", tenant, "consumer", name)
	return http.StatusNoContent, nil, nil
}
