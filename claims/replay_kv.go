package claims

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// ReplayBucketConfig is the configuration of a replay bucket holding at
// most capacity claims (0: protocol.DefaultReplayCapacity; a negative
// capacity or replica count is refused when the bucket is opened), enforced by
// MaxMsgs with DiscardNew. Keys carry per-key TTLs but the bucket has no
// expiry markers: an R3 stream at capacity would refuse the marker and the
// expired claim would hold its slot forever. Pass the bucket to NewKVReplay.
func ReplayBucketConfig(name string, capacity int64, replicas int) kvstore.BucketConfig {
	if capacity == 0 {
		capacity = protocol.DefaultReplayCapacity
	}
	return kvstore.BucketConfig{
		Name:           name,
		Description:    "sluice replay claims",
		Replicas:       replicas,
		MaxMsgs:        capacity,
		LimitMarkerTTL: time.Second,
		NoMarkers:      true,
	}
}

// KVReplay is the fleet-wide ReplayStore: one create-if-absent write per
// claim under ReplayKVKey(namespace, key), value {"u":<retain_until>}, with a
// per-key TTL running to retain_until (at least 1 s: the store does not
// judge timestamps, the verifier's tolerance does, and a past pair arriving
// many times at once must still be Claimed once).
//
// Capacity is the bucket's MaxMsgs: a new pair beyond it is Full; an
// expired pair frees its slot when the server removes it (up to ~0.35 s
// late). A duplicate is AlreadyClaimed even at full capacity: after a
// "full" answer KVReplay asks the stream leader for the key, rather than
// depend on the server checking the expected sequence first. Safe for
// concurrent use.
type KVReplay struct {
	b   *kvstore.Bucket
	now func() time.Time
	log *slog.Logger
}

var _ ReplayStore = (*KVReplay)(nil)

// NewKVReplay returns a ReplayStore on b (see ReplayBucketConfig).
// Options: WithClock, WithLogger. Errors: protocol.ErrInvalidOption.
func NewKVReplay(b *kvstore.Bucket, opts ...KVReplayOption) (*KVReplay, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil bucket", errInvalidOption)
	}
	o, err := newOptions(opts, KVReplayOption.applyKVReplay)
	if err != nil {
		return nil, err
	}
	return &KVReplay{b: b, now: o.now, log: o.log.With("bucket", b.Name())}, nil
}

// replayTTL is the TTL of a replay claim: retainUntil (Unix seconds) -
// now, rounded up to whole seconds, at least 1 s, at most MaxTTL.
func replayTTL(retainUntil int64, now time.Time) time.Duration {
	d := time.Unix(retainUntil, 0).Sub(now) // saturates, never overflows
	if d > MaxTTL {
		d = MaxTTL
	}
	return kvstore.RoundTTL(d)
}

// Claim records (namespace, key) until retainUntil: Claimed (new pair),
// AlreadyClaimed (held already, also at full capacity; retention not
// refreshed), or Full.
func (r *KVReplay) Claim(ctx context.Context, namespace, key string, retainUntil int64) (protocol.ReplayOutcome, error) {
	if err := protocol.ValidateReplay(namespace, key, retainUntil); err != nil {
		return 0, err
	}
	k := ReplayKVKey(namespace, key)
	ttl := replayTTL(retainUntil, r.now())
	val := []byte(`{"u":` + strconv.FormatInt(retainUntil, 10) + `}`)
	_, _, err := r.b.Create(ctx, k, val, ttl)
	switch {
	case err == nil:
		return protocol.Claimed, nil
	case errors.Is(err, kvstore.ErrExists):
		return protocol.AlreadyClaimed, nil
	case errors.Is(err, kvstore.ErrFull):
		// A duplicate must never read as full, whatever order the server
		// checks in: look (at the leader, not a lagging replica).
		if _, gerr := r.b.GetLeader(ctx, k); gerr == nil {
			return protocol.AlreadyClaimed, nil
		} else if !errors.Is(gerr, kvstore.ErrNotFound) {
			return 0, fmt.Errorf("%w: replay %s: %w", errUnavailable, k, gerr)
		}
		return protocol.Full, nil
	}
	return 0, fmt.Errorf("%w: replay %s: %w", errUnavailable, k, err)
}

// Release forgets (namespace, key): a stream purge by subject, which needs
// no free slot (a purge marker would be refused at capacity) and frees the
// pair's slot at once.
func (r *KVReplay) Release(ctx context.Context, namespace, key string) error {
	if err := protocol.ValidateReplay(namespace, key, 0); err != nil {
		return err
	}
	k := ReplayKVKey(namespace, key)
	if err := r.b.Forget(ctx, k); err != nil {
		return fmt.Errorf("%w: replay release %s: %w", errUnavailable, k, err)
	}
	return nil
}
