package hooks

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/internal/names"
)

// Bounds of a redelivery (a rewind with a deliver subject).
const (
	// MaxDeliverSubjectBytes bounds a deliver subject.
	MaxDeliverSubjectBytes = 255
	// MaxDeliverTokens bounds the tokens a deliver subject adds below the
	// tenant's namespace.
	MaxDeliverTokens = 8
	// DefaultPushInFlight is a push consumer's bound of unacknowledged
	// hooks when the caller gives none; MaxPushInFlight the largest
	// bound a caller may ask for.
	DefaultPushInFlight = 64
	MaxPushInFlight     = 1024
)

// ErrDeliverSubject is returned by Rewind for a deliver subject outside
// the tenant's redelivery namespace.
var ErrDeliverSubject = errors.New("hooks: deliver subject outside the tenant's redelivery namespace")

// ValidDeliverSubject reports whether subj is a subject a rewind of
// tenant's hooks may push to: authz.RedeliverPrefix(prefix, tenant) or below
// it by at most MaxDeliverTokens tokens of [A-Za-z0-9_-], at most
// MaxDeliverSubjectBytes. JetStream pushes as the account, whatever the
// caller's permissions, so anything wider would let a tenant's hooks land on
// another tenant's subjects, sluice's own, or the JetStream API.
func ValidDeliverSubject(prefix, tenant, subj string) bool {
	base := authz.RedeliverPrefix(prefix, tenant)
	if subj == base {
		return true
	}
	rest, ok := strings.CutPrefix(subj, base+".")
	if !ok || len(subj) > MaxDeliverSubjectBytes {
		return false
	}
	n := 0
	for tok := range strings.SplitSeq(rest, ".") {
		if !names.PlainToken(tok) {
			return false
		}
		n++
	}
	return n <= MaxDeliverTokens
}

// createPush creates the push consumer of a redelivery: cfg with the
// deliver subject and its bounds (explicit acks: at most MaxInFlight
// unacked; RateBPS).
func (s *HookStore) createPush(ctx context.Context, spec RewindSpec, cfg jetstream.ConsumerConfig) (*jetstream.ConsumerInfo, error) {
	cfg.DeliverSubject = spec.DeliverSubject
	if cfg.MaxAckPending <= 0 {
		cfg.MaxAckPending = DefaultPushInFlight
	}
	cfg.RateLimit = spec.RateBPS
	c, err := s.js.CreatePushConsumer(ctx, s.streamOf(spec.Tenant), cfg)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}
