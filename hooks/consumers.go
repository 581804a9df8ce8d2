package hooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/internal/names"
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

// ErrConsumerNotFound and ErrTooManyConsumers are the managed consumers'
// errors; ErrConsumerConfig wraps JetStream's refusal of a configuration.
var (
	ErrConsumerNotFound = errors.New("hooks: no such managed consumer")
	ErrTooManyConsumers = errors.New("hooks: the tenant has its maximum of managed consumers")
	ErrConsumerConfig   = errors.New("hooks: consumer configuration refused")
	// ErrConsumersOnHub: a leaf's store keeps its hooks in an outbox until
	// the hub has them; a tenant's consumers live on the hub.
	ErrConsumersOnHub = errors.New("hooks: a leaf keeps no hooks stream: manage consumers on the hub")
)

// Validate checks spec as the admin API does; the error is the reason.
func (spec ConsumerSpec) Validate() error {
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
		if !names.ValidName(s) {
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

// PutConsumer creates (created true) or replaces tenant's consumer name.
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

// GetConsumer is tenant's consumer name (ErrConsumerNotFound).
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

// ListConsumers is the tenant's consumers by
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

// DeleteConsumer deletes tenant's consumer name (ErrConsumerNotFound).
func (s *HookStore) DeleteConsumer(ctx context.Context, tenant, name string) error {
	if s.outbox {
		return ErrConsumersOnHub
	}
	if _, err := s.GetConsumer(ctx, tenant, name); err != nil {
		return err
	}
	return consumerErr(s.js.DeleteConsumer(ctx, s.streamOf(tenant), protocol.ManagedConsumer(tenant, name)))
}
