package claims

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// Sharded is a Store over the claims buckets of a fleet's shards: each
// call goes to the store of its tenant's shard, protocol.Shard(id.Tenant,
// len(shards)), so a key's claim lives in one bucket and dedupe stays
// exact. With one shard it is that shard's store.
type Sharded struct {
	shards []Store
}

// NewSharded returns the store routing to shards (shard k at index k;
// 1..protocol.MaxShards stores, none nil).
func NewSharded(shards ...Store) (*Sharded, error) {
	if len(shards) < 1 || len(shards) > protocol.MaxShards {
		return nil, fmt.Errorf("claims: %d shards, want 1..%d", len(shards), protocol.MaxShards)
	}
	for k, s := range shards {
		if s == nil {
			return nil, fmt.Errorf("claims: shard %d has no store", k)
		}
	}
	return &Sharded{shards: shards}, nil
}

// errNoShard is a call without a tenant: it cannot be routed, and every
// store refuses it as invalid anyway.
var errNoShard = errors.New("claims: a claim id needs a tenant")

// of is the store of id's shard.
func (s *Sharded) of(id ID) (Store, error) {
	if id.Tenant == "" {
		return nil, fmt.Errorf("%w: %w", protocol.ErrInvalid, errNoShard)
	}
	return s.shards[protocol.Shard(id.Tenant, len(s.shards))], nil
}

// Claim is Store.Claim in id's shard.
func (s *Sharded) Claim(ctx context.Context, id ID, hookID string, pendingTTL time.Duration) (Result, error) {
	st, err := s.of(id)
	if err != nil {
		return Result{}, err
	}
	return st.Claim(ctx, id, hookID, pendingTTL)
}

// StartClaim is Store.StartClaim in id's shard.
func (s *Sharded) StartClaim(id ID, hookID string, pendingTTL time.Duration) (StartedClaim, error) {
	st, err := s.of(id)
	if err != nil {
		return nil, err
	}
	return st.StartClaim(id, hookID, pendingTTL)
}

// Settle is Store.Settle in id's shard.
func (s *Sharded) Settle(ctx context.Context, id ID, hookID string, rev uint64, ttl time.Duration) error {
	st, err := s.of(id)
	if err != nil {
		return err
	}
	return st.Settle(ctx, id, hookID, rev, ttl)
}

// SettleOwn is Store.SettleOwn in id's shard.
func (s *Sharded) SettleOwn(ctx context.Context, id ID, hookID, digest string, rev uint64, ttl time.Duration) error {
	st, err := s.of(id)
	if err != nil {
		return err
	}
	return st.SettleOwn(ctx, id, hookID, digest, rev, ttl)
}

// StartSettleOwn is Store.StartSettleOwn in id's shard.
func (s *Sharded) StartSettleOwn(id ID, hookID string, rev uint64, ttl time.Duration) (StartedSettle, error) {
	st, err := s.of(id)
	if err != nil {
		return nil, err
	}
	return st.StartSettleOwn(id, hookID, rev, ttl)
}

// Release is Store.Release in id's shard.
func (s *Sharded) Release(ctx context.Context, id ID, hookID string, rev uint64) error {
	st, err := s.of(id)
	if err != nil {
		return err
	}
	return st.Release(ctx, id, hookID, rev)
}

// Get is Store.Get in id's shard.
func (s *Sharded) Get(ctx context.Context, id ID) (State, error) {
	st, err := s.of(id)
	if err != nil {
		return State{}, err
	}
	return st.Get(ctx, id)
}
