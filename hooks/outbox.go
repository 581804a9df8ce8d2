package hooks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// The outbox of a leaf (docs/LEAF-MODE.md): a leaf
// stores every hook in a local work-queue stream first, on the subject of
// its hub subject with "hooks" replaced by "outbox", and a forwarder moves
// it to the hub's hooks stream. Local subjects differ from the hub's so
// that no stream on either side captures the other's messages across the
// leaf connection (nats-server#3161), and the outbox never crosses it.

// OutboxStream is the name of a leaf's outbox stream for the hub's hooks
// stream hooksStream.
func OutboxStream(hooksStream string) string { return hooksStream + "_OUTBOX" }

// OutboxSubjects is the outbox stream's subject filter, "<prefix>.outbox.>".
func OutboxSubjects(prefix string) string { return prefix + ".outbox.>" }

// OutboxSubject maps a hook's hub subject "<prefix>.hooks.<rest>" to its
// outbox subject "<prefix>.outbox.<rest>".
func OutboxSubject(prefix, hubSubject string) string {
	return prefix + ".outbox." + strings.TrimPrefix(hubSubject, prefix+".hooks.")
}

// HubSubject maps an outbox subject back to the hub's; ok is false for a
// subject outside the outbox.
func HubSubject(prefix, outboxSubject string) (string, bool) {
	rest, ok := strings.CutPrefix(outboxSubject, prefix+".outbox.")
	if !ok || rest == "" {
		return "", false
	}
	return prefix + ".hooks." + rest, true
}

// OutboxConfig describes a leaf's outbox stream.
type OutboxConfig struct {
	// HooksStream is the hub's hooks stream (default "HOOKS"): the outbox
	// is OutboxStream(HooksStream).
	HooksStream string
	// Prefix is the subject prefix.
	Prefix string
	// MaxBytes bounds the outbox (0: unlimited). When full, new hooks are
	// refused (503): an unforwarded hook is never dropped.
	MaxBytes int64
}

// Validate refuses a negative MaxBytes (ErrInvalidConfig); zero is
// unlimited.
func (cfg OutboxConfig) Validate() error {
	if cfg.MaxBytes < 0 {
		return fmt.Errorf("%w: outbox: negative max bytes %d", ErrInvalidConfig, cfg.MaxBytes)
	}
	return nil
}

// EnsureOutbox creates or updates a leaf's outbox: a work-queue stream
// (a hook leaves it when the forwarder acks it, after the hub's ack),
// file storage, no age limit, new hooks refused when full.
func EnsureOutbox(ctx context.Context, js jetstream.JetStream, cfg OutboxConfig) (jetstream.Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HooksStream == "" {
		cfg.HooksStream = protocol.HooksStreamName
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	sc := jetstream.StreamConfig{
		Name:        OutboxStream(cfg.HooksStream),
		Description: "sluice edge: accepted webhooks not yet forwarded to the hub",
		Subjects:    []string{OutboxSubjects(cfg.Prefix)},
		Storage:     jetstream.FileStorage,
		Replicas:    1,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardNew,
		Duplicates:  2 * time.Minute,
		Retention:   jetstream.WorkQueuePolicy,
	}
	return createStream(ctx, js, sc)
}

// NewOutboxStore returns a store that publishes hooks to a leaf's outbox
// (see EnsureOutbox) instead of the hooks stream.
func NewOutboxStore(js jetstream.JetStream, prefix, hooksStream string) *HookStore {
	if hooksStream == "" {
		hooksStream = protocol.HooksStreamName
	}
	return &HookStore{js: js, w: []*kvstore.Writer{kvstore.NewWriter(js.Conn())}, prefix: prefix, stream: OutboxStream(hooksStream), shards: 1, outbox: true}
}

// LeafDeny are the subjects that must not cross a leaf's connection
// to its hub, in either direction (imports: not from the hub). Leaf and hub
// have the same stream, bucket, consumer and service names, so only the
// forwarder's publishes to the hub's hooks subjects (and inbox replies) may
// cross (docs/DESIGN.md "Leaf mode"); a hub of several shards takes hooks on
// protocol.ShardHooksSubjects, denied inbound too.
func LeafDeny(prefix string) (both, imports []string) {
	return []string{"$JS.ACK.>", "$JS.FC.>", "$JS.EVENT.>", "$SRV.>", prefix + ".v1.>", prefix + ".node.>", OutboxSubjects(prefix)},
		[]string{prefix + ".hooks.>", prefix + ".shard.>"}
}
