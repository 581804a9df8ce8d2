package hooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Bounds of a rewind.
const (
	MaxRewindSources = 16
	MaxRewindTypes   = 16
	// RewindInactive is how long an ephemeral rewind consumer lives unread.
	RewindInactive = time.Hour
)

// RewindSpec is a consumer over one tenant's stored hooks.
type RewindSpec struct {
	Tenant   string
	Sources  []string  // nil: every source of the tenant
	Types    []string  // nil: every type (needs Sources when set)
	Consumer string    // the consumer's name
	Durable  bool      // durable, or ephemeral (deleted after RewindInactive unread)
	Since    time.Time // start at this receipt time (zero: StartSeq, or the beginning)
	StartSeq uint64    // start at this stream sequence
	Paced    bool      // deliver at the original pace (ReplayOriginal)
	// DeliverSubject, when set, makes the consumer a push consumer that
	// JetStream delivers to this subject (ValidDeliverSubject: the
	// tenant's redelivery namespace), at most MaxInFlight unacked at a
	// time and at most RateBPS bits per second (0: unlimited).
	DeliverSubject string
	// MaxInFlight bounds the unacknowledged messages (0: DefaultPushInFlight
	// for a push consumer, JetStream's default for a pull consumer).
	MaxInFlight int
	RateBPS     uint64
}

// RewindResult describes the created consumer.
type RewindResult struct {
	Stream         string   `json:"stream"`
	Consumer       string   `json:"consumer"`
	Durable        bool     `json:"durable"`
	FilterSubjects []string `json:"filter_subjects"`
	NumPending     uint64   `json:"num_pending"`
	DeliverSubject string   `json:"deliver_subject,omitempty"`
	MaxInFlight    int      `json:"max_in_flight,omitempty"`
	// Warnings say why the consumer may match less than asked, e.g.
	// types on a source that stores its hooks without a type.
	Warnings []string `json:"warnings,omitempty"`
}

// ErrConsumerExists is returned by Rewind for a name already in use.
var ErrConsumerExists = errors.New("hooks: consumer exists")

// rewindFilters are the subjects of a rewind: the tenant's, each source's
// (typed or not), or each source's types.
func rewindFilters(prefix string, s RewindSpec) []string {
	if len(s.Sources) == 0 {
		return []string{prefix + ".hooks." + protocol.EncodeToken(s.Tenant) + ".>"}
	}
	var out []string
	for _, src := range s.Sources {
		if len(s.Types) == 0 {
			subj := protocol.HookSubject(prefix, s.Tenant, src)
			out = append(out, subj, subj+".*")
			continue
		}
		for _, t := range s.Types {
			out = append(out, protocol.TypedHookSubject(prefix, s.Tenant, src, t))
		}
	}
	return out
}

// Rewind creates a rewind consumer: a pull consumer (explicit acks) on the
// spec's subjects from its start.
func (s *HookStore) Rewind(ctx context.Context, spec RewindSpec) (RewindResult, error) {
	if spec.DeliverSubject != "" && !ValidDeliverSubject(s.prefix, spec.Tenant, spec.DeliverSubject) {
		return RewindResult{}, fmt.Errorf("%w: want %s or below it (at most %d more tokens of [A-Za-z0-9_-])",
			ErrDeliverSubject, authz.RedeliverPrefix(s.prefix, spec.Tenant), MaxDeliverTokens)
	}
	cfg := jetstream.ConsumerConfig{
		Name:           spec.Consumer,
		FilterSubjects: rewindFilters(s.prefix, spec),
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		Description:    "sluice rewind of tenant " + spec.Tenant,
	}
	if spec.Durable {
		cfg.Durable = spec.Consumer
	} else {
		cfg.InactiveThreshold = RewindInactive
	}
	switch {
	case !spec.Since.IsZero():
		since := spec.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	case spec.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, spec.StartSeq
	}
	if spec.Paced {
		cfg.ReplayPolicy = jetstream.ReplayOriginalPolicy
	}
	cfg.MaxAckPending = spec.MaxInFlight
	var info *jetstream.ConsumerInfo
	var err error
	if spec.DeliverSubject != "" {
		info, err = s.createPush(ctx, spec, cfg)
	} else {
		var c jetstream.Consumer
		if c, err = s.js.CreateConsumer(ctx, s.streamOf(spec.Tenant), cfg); err == nil {
			info, err = c.Info(ctx)
		}
	}
	if errors.Is(err, jetstream.ErrConsumerExists) {
		return RewindResult{}, ErrConsumerExists
	}
	if err != nil {
		return RewindResult{}, kvstore.MapError(err)
	}
	return RewindResult{Stream: s.streamOf(spec.Tenant), Consumer: spec.Consumer, Durable: spec.Durable, FilterSubjects: cfg.FilterSubjects,
		NumPending: info.NumPending, DeliverSubject: spec.DeliverSubject, MaxInFlight: info.Config.MaxAckPending}, nil
}
