package hooks

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/tracing"
)

// Headers of a stored hook (PROTOCOL.md).
const (
	HeaderHookID     = "Sluice-Hook-Id"
	HeaderTenant     = "Sluice-Tenant"
	HeaderSource     = "Sluice-Source"
	HeaderDedupeKey  = "Sluice-Dedupe-Key"
	HeaderReceivedAt = "Sluice-Received-At"
	HeaderEventType  = "Sluice-Event-Type"
)

// OverheadBytes bounds what a stored hook adds to its body: the subject
// and the Sluice-* and Nats-* headers. A body larger than the connection's
// max payload minus this cannot be stored (httpapi answers 413).
const OverheadBytes = 8192

// StreamConfig describes the stream that stores accepted hooks.
type StreamConfig struct {
	// Name of the stream (default "HOOKS").
	Name string
	// Prefix is the subject prefix: the stream captures "<prefix>.hooks.>".
	Prefix string
	// Replicas of the stream (default 1).
	Replicas int
	// MaxAge bounds how long a hook is kept (default 7 days; 0 keeps that
	// default, negative = forever).
	MaxAge time.Duration
	// MaxBytes bounds the stream's size (0: unlimited). When full, new hooks
	// are refused (503), never older ones dropped.
	MaxBytes int64
	// Duplicates is JetStream's Nats-Msg-Id window (default 2 min).
	Duplicates time.Duration
	// Shard and Shards: the stream of shard Shard of a fleet of Shards
	// shards (docs/PROTOCOL.md "Shards"; 0 counts as 1). With one shard the
	// stream is Name capturing "<prefix>.hooks.>"; with more, it is
	// protocol.ShardName(Name, Shard) capturing
	// "<prefix>.shard.<Shard>.hooks.>" and storing under "<prefix>.hooks.>"
	// (a subject transform), so the stored subjects are the same.
	Shard, Shards int
	// Placement places the stream when it is created (nil: where the
	// server chooses); an existing stream keeps its placement.
	Placement *jetstream.Placement
}

// Validate refuses a negative Replicas, MaxBytes, Duplicates, Shard or
// Shards (a negative MaxAge is "forever"); zero keeps the default.
func (cfg StreamConfig) Validate() error {
	if cfg.Replicas < 0 || cfg.MaxBytes < 0 || cfg.Duplicates < 0 || cfg.Shard < 0 || cfg.Shards < 0 {
		return fmt.Errorf("%w: hooks stream: negative replicas, max bytes, duplicates window or shard", ErrInvalidConfig)
	}
	return nil
}

// EnsureStream creates or updates the hooks stream. Errors:
// ErrInvalidConfig (Validate), the server's.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg StreamConfig) (jetstream.Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = protocol.HooksStreamName
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	switch {
	case cfg.MaxAge == 0:
		cfg.MaxAge = 7 * 24 * time.Hour
	case cfg.MaxAge < 0:
		cfg.MaxAge = 0
	}
	if cfg.Duplicates == 0 {
		cfg.Duplicates = 2 * time.Minute
	}
	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	sc := jetstream.StreamConfig{
		Name:        cfg.Name,
		Description: "sluice: accepted webhooks",
		Subjects:    []string{protocol.HooksSubjects(cfg.Prefix)},
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.MaxAge,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardNew,
		Duplicates:  cfg.Duplicates,
		Retention:   jetstream.LimitsPolicy,
		// A leaf's forwarder sends its hooks in atomic batches, so that
		// the hub never stores one of them after a later one
		// (forward.Forwarder).
		AllowAtomicPublish: true,
	}
	if cfg.Shards > 1 {
		capture := protocol.ShardHooksSubjects(cfg.Prefix, cfg.Shard)
		sc.Name = protocol.ShardName(cfg.Name, cfg.Shard)
		sc.Description = fmt.Sprintf("sluice: accepted webhooks of shard %d of %d", cfg.Shard, cfg.Shards)
		sc.Subjects = []string{capture}
		sc.SubjectTransform = &jetstream.SubjectTransformConfig{Source: capture, Destination: protocol.HooksSubjects(cfg.Prefix)}
	}
	sc.Placement = cfg.Placement
	return createStream(ctx, js, sc)
}

// EnsureStreams creates or updates the hooks stream of every shard of a
// fleet of shards shards (cfg's Shard and Shards are set for each, and
// its Placement to place(k) unless place is nil), shard k at index k.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, shards int, place func(shard int) *jetstream.Placement) ([]jetstream.Stream, error) {
	out := make([]jetstream.Stream, 0, max(shards, 1))
	for k := range max(shards, 1) {
		c := cfg
		c.Shard, c.Shards = k, shards
		if place != nil {
			c.Placement = place(k)
		}
		st, err := EnsureStream(ctx, js, c)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// HooksStreams are the names of the hooks streams of a fleet of shards
// shards whose shard 0 stream is name (shard k at index k).
func HooksStreams(name string, shards int) []string {
	out := make([]string, max(shards, 1))
	for k := range out {
		out[k] = protocol.ShardName(name, k)
	}
	return out
}

// createStream creates or updates the stream sc, retrying while JetStream
// is not ready.
func createStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	// Each attempt is bounded (kvstore.Retry): a request lost to a stream
	// leader changing (a step-down) costs one attempt, not the whole
	// budget.
	st, err := kvstore.EnsureStream(ctx, js, sc)
	if err != nil {
		return nil, fmt.Errorf("hooks: stream %s: %w", sc.Name, kvstore.MapError(err))
	}
	return st, nil
}

// Hook is one accepted webhook, as stored.
type Hook struct {
	ID          string
	Tenant      string
	Source      string
	DedupeKey   string
	ReceivedAt  time.Time
	ContentType string
	Body        []byte
	// Typed is true for a source with event_type: the hook is stored under
	// protocol.TypedHookSubject with Type (and header Sluice-Event-Type when set).
	Typed bool
	Type  string
}

// safeHeaderValue reports whether s is printable ASCII without leading or
// trailing spaces.
func safeHeaderValue(s string) bool {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// setSafeHeader sets header name to v when v is set. A value from a
// request (a JSON body may hold any byte) must not hold CR, LF or other
// controls (they would forge headers): such a value is percent-encoded and
// name+"-Encoding: percent" says so.
func setSafeHeader(h nats.Header, name, v string) {
	switch {
	case v == "":
	case safeHeaderValue(v):
		h.Set(name, v)
	default:
		h.Set(name, url.PathEscape(v))
		h.Set(name+"-Encoding", "percent")
	}
}

// HookStore publishes hooks to the hooks stream and waits for the ack.
type HookStore struct {
	js jetstream.JetStream
	// w publishes on the lean write path (kvstore/ack.go), one Writer per
	// shard's stream: a Writer tells a stale ack by its sequence, which
	// only one stream's acks can be compared by.
	w      []*kvstore.Writer
	prefix string
	stream string
	shards int  // the fleet's shards: a tenant's hooks are in stream ShardName(stream, its shard)
	outbox bool // a leaf's outbox: OutboxSubject of the hub subject
}

// NewShardedHookStore returns a store that publishes under prefix to the
// hooks streams of a fleet of shards shards (EnsureStreams), each tenant's
// hooks to its shard's stream (protocol.Shard); stream names shard 0's.
// Its reads (Find, Rewind) read the tenant's shard's stream.
func NewShardedHookStore(js jetstream.JetStream, prefix, stream string, shards int) *HookStore {
	if stream == "" {
		stream = protocol.HooksStreamName
	}
	shards = max(shards, 1)
	w := make([]*kvstore.Writer, shards)
	for k := range w {
		w[k] = kvstore.NewWriter(js.Conn())
	}
	return &HookStore{js: js, w: w, prefix: prefix, stream: stream, shards: shards}
}

// streamOf is the stream holding tenant's hooks.
func (s *HookStore) streamOf(tenant string) string {
	return protocol.ShardName(s.stream, protocol.Shard(tenant, s.shards))
}

// ErrNotStored is returned by Store when JetStream did not acknowledge the
// hook: it is not durable and must not be answered 2xx.
var ErrNotStored = errors.New("edge: hook not stored")

// Store publishes the hook with Nats-Msg-Id = hook id and returns its stream
// sequence once JetStream has acknowledged it. Any failure wraps ErrNotStored.
func (s *HookStore) Store(ctx context.Context, h Hook) (uint64, error) {
	subject := protocol.HookSubject(s.prefix, h.Tenant, h.Source)
	if h.Typed {
		subject = protocol.TypedHookSubject(s.prefix, h.Tenant, h.Source, h.Type)
	}
	publish, shard := subject, protocol.Shard(h.Tenant, s.shards)
	if s.outbox {
		subject = OutboxSubject(s.prefix, subject)
		publish = subject
	} else {
		publish = protocol.ShardPublishSubject(s.prefix, shard, s.shards, subject)
	}
	m := nats.NewMsg(publish)
	m.Data = h.Body
	m.Header.Set(HeaderHookID, h.ID)
	m.Header.Set(HeaderTenant, h.Tenant)
	m.Header.Set(HeaderSource, h.Source)
	setSafeHeader(m.Header, HeaderDedupeKey, h.DedupeKey)
	if h.Typed {
		setSafeHeader(m.Header, HeaderEventType, h.Type)
	}
	m.Header.Set(HeaderReceivedAt, h.ReceivedAt.UTC().Format(time.RFC3339Nano))
	if h.ContentType != "" {
		m.Header.Set("Content-Type", h.ContentType)
	}
	tracing.Inject(ctx, m.Header) // traceparent: only when ctx is traced
	seq, err := s.put(ctx, shard, publish, h.ID, m.Header, m.Data)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNotStored, err)
	}
	return seq, nil
}

// put is the one way a hook is written (Store, a dead letter's redrive):
// hdr and data published on publish, id its Nats-Msg-Id, expecting shard's
// stream, on that stream's lean write path; its stream sequence once
// acked. The ack is JetStream's only: a 2xx waits for the node's barrier
// too (Config.Sync).
func (s *HookStore) put(ctx context.Context, shard int, publish, id string, hdr nats.Header, data []byte) (uint64, error) {
	return s.putWith(ctx, shard, publish, id, hdr, data, s.w[shard].Publish)
}

// putOnce is put for a write whose id names it for good (a dead letter's
// redrive): written again within the stream's duplicate window it is
// acked with the first write's sequence and nothing is stored. It waits
// for its ack on a reply subject of its own (jetstream.PublishMsg): the
// lean path takes an ack naming an older message for a stale answer
// (kvstore.Writer), which a duplicate's is.
func (s *HookStore) putOnce(ctx context.Context, shard int, publish, id string, hdr nats.Header, data []byte) (uint64, error) {
	return s.putWith(ctx, shard, publish, id, hdr, data, func(ctx context.Context, subject string, hdr nats.Header, data []byte) (uint64, error) {
		pa, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: hdr, Data: data})
		if err != nil {
			return 0, err
		}
		return pa.Sequence, nil
	})
}

// putWith sets a hook's publish conditions (its id, its stream) and
// publishes it with publish.
func (s *HookStore) putWith(ctx context.Context, shard int, subject, id string, hdr nats.Header, data []byte,
	publish func(ctx context.Context, subject string, hdr nats.Header, data []byte) (uint64, error)) (uint64, error) {
	hdr.Set(jetstream.MsgIDHeader, id)
	hdr.Set(jetstream.ExpectedStreamHeader, protocol.ShardName(s.stream, shard))
	return publish(ctx, subject, hdr, data)
}

// ErrInvalidConfig is wrapped by the error of a stream configuration's
// Validate (StreamConfig, OutboxConfig).
var ErrInvalidConfig = errors.New("hooks: invalid config")

// Outbox reports whether s stores to a leaf's outbox (NewOutboxStore):
// such a store keeps no hooks stream, consumers or dead letters.
func (s *HookStore) Outbox() bool { return s.outbox }
