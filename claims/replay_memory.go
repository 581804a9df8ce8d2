package claims

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// MemoryReplay is the node-local ReplayStore with an exact capacity. A
// claim is held until retain_until and at least one second (like
// KVReplay); an expired claim no longer counts, and a claim that finds the
// store full first drops the expired entries (Sweep drops them eagerly).
// Safe for concurrent use.
type MemoryReplay struct {
	capacity int
	now      func() time.Time

	mu       sync.Mutex
	entries  map[replayKey]*replayEntry
	byExpiry expiryHeap[*replayEntry]
}

var _ ReplayStore = (*MemoryReplay)(nil)

type replayKey struct{ namespace, key string }

type replayEntry struct {
	key     replayKey
	expires time.Time
	heapIdx int
}

// NewMemoryReplay returns an empty MemoryReplay. Options:
// WithReplayCapacity, WithClock. Errors: protocol.ErrInvalidOption.
func NewMemoryReplay(opts ...MemReplayOption) (*MemoryReplay, error) {
	o, err := newOptions(opts, MemReplayOption.applyMemReplay)
	if err != nil {
		return nil, err
	}
	return &MemoryReplay{capacity: o.capacity, now: o.now, entries: map[replayKey]*replayEntry{}}, nil
}

// Len is the number of pairs held, expired ones not yet dropped included.
func (r *MemoryReplay) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}

// Claim records (namespace, key) until retainUntil (at least 1 s from
// now), with KVReplay.Claim's results; Full means capacity is reached by
// unexpired pairs.
func (r *MemoryReplay) Claim(ctx context.Context, namespace, key string, retainUntil int64) (protocol.ReplayOutcome, error) {
	if err := protocol.ValidateReplay(namespace, key, retainUntil); err != nil {
		return 0, err
	}
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	now := r.now()
	expires := time.Unix(retainUntil, 0)
	if floor := now.Add(time.Second); expires.Before(floor) {
		expires = floor
	}
	k := replayKey{namespace, key}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[k]; e != nil {
		if e.expires.After(now) {
			return protocol.AlreadyClaimed, nil
		}
		r.remove(e)
	}
	if len(r.entries) >= r.capacity {
		r.sweep(now)
		if len(r.entries) >= r.capacity {
			return protocol.Full, nil
		}
	}
	e := &replayEntry{key: k, expires: expires}
	r.entries[k] = e
	heap.Push(&r.byExpiry, e)
	return protocol.Claimed, nil
}

// Release forgets (namespace, key).
func (r *MemoryReplay) Release(ctx context.Context, namespace, key string) error {
	if err := protocol.ValidateReplay(namespace, key, 0); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[replayKey{namespace, key}]; e != nil {
		r.remove(e)
	}
	return nil
}

// Sweep drops every pair whose retention (retain_until, or one
// second after its claim if that is later) is at or before now (Unix
// seconds) and returns how many it dropped.
//
// Errors: protocol.ErrInvalid when now is outside 0..MaxRetainUntil.
func (r *MemoryReplay) Sweep(now int64) (removed int, err error) {
	if now < 0 || now > protocol.MaxRetainUntil {
		return 0, fmt.Errorf("%w: now must be in 0..%d", protocol.ErrInvalid, int64(protocol.MaxRetainUntil))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sweep(time.Unix(now, 0)), nil
}

func (r *MemoryReplay) sweep(now time.Time) int {
	n := 0
	for len(r.byExpiry) > 0 && !r.byExpiry[0].expires.After(now) {
		r.remove(r.byExpiry[0])
		n++
	}
	return n
}

func (r *MemoryReplay) remove(e *replayEntry) {
	delete(r.entries, e.key)
	heap.Remove(&r.byExpiry, e.heapIdx)
}

func (e *replayEntry) expiry() time.Time { return e.expires }
func (e *replayEntry) setIndex(i int)    { e.heapIdx = i }
