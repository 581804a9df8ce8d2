package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/internal/names"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Bounds of a rewind.
const (
	MaxRewindSources = 16
	MaxRewindTypes   = 16
	maxConsumerName  = 64
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
var ErrConsumerExists = errors.New("httpapi: consumer exists")

// HookRewinder creates rewind consumers (HookStore implements it).
type HookRewinder interface {
	Rewind(ctx context.Context, spec RewindSpec) (RewindResult, error)
}

// rewindFilters are the subjects of a rewind: the tenant's, each source's
// (typed or not), or each source's types.
func rewindFilters(prefix string, s RewindSpec) []string {
	if len(s.Sources) == 0 {
		return []string{prefix + ".hooks." + protocol.EncodeToken(s.Tenant) + ".>"}
	}
	var out []string
	for _, src := range s.Sources {
		if len(s.Types) == 0 {
			subj := HooksSubject(prefix, s.Tenant, src)
			out = append(out, subj, subj+".*")
			continue
		}
		for _, t := range s.Types {
			out = append(out, TypedHooksSubject(prefix, s.Tenant, src, t))
		}
	}
	return out
}

// Rewind implements HookRewinder: a pull consumer (explicit acks) on the
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

// validConsumerName: 1..64 bytes of [A-Za-z0-9_-] (a subject token).
func validConsumerName(s string) bool {
	return len(s) <= maxConsumerName && names.PlainToken(s)
}

// postRewind is POST /v1/admin/hooks/{tenant}/rewind.
func (h *Handler) postRewind(w http.ResponseWriter, r *http.Request) {
	tenant, ok := pathTenant(w, r)
	if !ok {
		return
	}
	bad := func(reason string) {
		protocol.InvalidRequest.Write(w, map[string]any{"reason": reason})
	}
	rw, ok := h.cfg.Hooks.(HookRewinder)
	if !ok {
		protocol.NotFound.Write(w, nil)
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
	case !validConsumerName(in.Consumer):
		bad("consumer must be 1..64 bytes of [A-Za-z0-9_-]")
		return
	case len(in.Sources) > MaxRewindSources || len(in.Types) > MaxRewindTypes:
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
	case in.MaxInFlight < 0 || in.MaxInFlight > MaxPushInFlight:
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
	spec := RewindSpec{Tenant: tenant, Sources: in.Sources, Types: in.Types, Consumer: in.Consumer, Durable: in.Durable, Paced: in.Paced,
		DeliverSubject: in.DeliverSubject, MaxInFlight: in.MaxInFlight, RateBPS: in.RateBPS}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if in.Since != nil {
		spec.Since = *in.Since
	}
	if in.StartHookID != "" {
		finder, _ := h.cfg.Hooks.(HookFinder)
		for _, src := range in.Sources {
			if finder == nil {
				break
			}
			rec, err := finder.Find(ctx, tenant, src, in.StartHookID, time.Time{})
			if err == nil {
				spec.StartSeq = rec.Seq
				break
			}
			if !errors.Is(err, ErrReceiptNotFound) {
				protocol.StoreUnavailable.Write(w, nil)
				return
			}
		}
		if spec.StartSeq == 0 {
			protocol.NotFound.Write(w, map[string]any{"reason": "start_hook_id is not in the stream"})
			return
		}
	}
	res, err := rw.Rewind(ctx, spec)
	switch {
	case errors.Is(err, ErrConsumerExists):
		protocol.ConsumerExists.Write(w, nil)
	case errors.Is(err, ErrDeliverSubject):
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
