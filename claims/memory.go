package claims

import (
	"container/heap"
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// DefaultMaxEntries is the default bound of a Memory store.
const DefaultMaxEntries = 100_000

// Memory is the node-local Store, used when the fleet store cannot answer:
// KV's semantics (validation, TTL rounding, ErrClaimLost) with revisions
// from a counter and expiry by an injectable clock, exactly when the rounded
// TTL has passed (KV: never early, up to ~0.35 s late).
//
// It is bounded (WithMaxEntries, default DefaultMaxEntries): a new claim
// that finds it full drops the expired entries, then evicts the oldest
// committed claim (dedupe of old keys weakens; delivery is at least once
// anyway). Pending claims are never evicted, which would let two holders
// work on one key: when all entries are live pending claims, Claim returns
// protocol.ErrUnavailable. Safe for concurrent use (one mutex, O(log n) calls).
type Memory struct {
	now func() time.Time
	max int

	mu        sync.Mutex
	rev       uint64
	entries   map[memKey]*memEntry
	byExpiry  expiryHeap[*memEntry] // every entry, soonest expiry first
	committed list.List             // committed entries, oldest commit first
}

var _ Store = (*Memory)(nil)

type memKey struct{ tenant, source, key string }

type memEntry struct {
	key       memKey
	committed bool
	hookID    string
	digest    string // what SettleOwn kept
	rev       uint64
	expires   time.Time
	heapIdx   int
	elem      *list.Element // in Memory.committed, when committed
}

// NewMemory returns an empty in-memory Store. Errors: protocol.ErrInvalidOption.
func NewMemory(opts ...MemOption) (*Memory, error) {
	o, err := newOptions(opts, MemOption.applyMemory)
	if err != nil {
		return nil, err
	}
	return &Memory{now: o.now, max: o.maxEntries, entries: map[memKey]*memEntry{}}, nil
}

// Len is the number of entries held, expired ones not yet dropped
// included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

func memKeyOf(id ID) memKey { return memKey{id.Tenant, id.Source, NormalizeKey(id.Key)} }

// live returns the unexpired entry under k, dropping an expired one.
// m.mu must be held.
func (m *Memory) live(k memKey, now time.Time) *memEntry {
	e := m.entries[k]
	if e != nil && !e.expires.After(now) {
		m.remove(e)
		return nil
	}
	return e
}

func (m *Memory) remove(e *memEntry) {
	delete(m.entries, e.key)
	heap.Remove(&m.byExpiry, e.heapIdx)
	if e.elem != nil {
		m.committed.Remove(e.elem)
		e.elem = nil
	}
}

// makeRoom frees one slot if the store is full. m.mu must be held.
func (m *Memory) makeRoom(now time.Time) error {
	if len(m.entries) < m.max {
		return nil
	}
	for len(m.byExpiry) > 0 && !m.byExpiry[0].expires.After(now) {
		m.remove(m.byExpiry[0])
	}
	if len(m.entries) < m.max {
		return nil
	}
	if front := m.committed.Front(); front != nil {
		m.remove(front.Value.(*memEntry))
		return nil
	}
	return fmt.Errorf("%w: in-memory claims full (%d pending claims)", errUnavailable, m.max)
}

// Claim takes id for hookID as a pending claim, as KV.Claim does;
// protocol.ErrUnavailable also when the store is full of live pending claims.
func (m *Memory) Claim(ctx context.Context, id ID, hookID string, pendingTTL time.Duration) (Result, error) {
	ttl, err := claimArgs(id, hookID, pendingTTL)
	if err != nil {
		return Result{}, err
	}
	if err := ctxErr(ctx); err != nil {
		return Result{}, err
	}
	now := m.now()
	k := memKeyOf(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.live(k, now); e != nil {
		if e.committed {
			return Result{Outcome: Duplicate, Revision: e.rev, HookID: e.hookID}, nil
		}
		if e.hookID == hookID { // our own claim: a retried call
			return Result{Outcome: OK, Revision: e.rev, HookID: hookID}, nil
		}
		return Result{Outcome: Pending, Revision: e.rev, HookID: e.hookID, RetryAfter: retryAfter(e.expires, now)}, nil
	}
	if err := m.makeRoom(now); err != nil {
		return Result{}, err
	}
	m.rev++
	e := &memEntry{key: k, hookID: hookID, rev: m.rev, expires: now.Add(ttl)}
	m.entries[k] = e
	heap.Push(&m.byExpiry, e)
	return Result{Outcome: OK, Revision: e.rev, HookID: hookID}, nil
}

// onHeld runs fn, under m.mu, on the live entry under id at rev held by
// hookID (else protocol.ErrClaimLost, see held), after the ctx check every call makes.
// op names the call in errors.
func (m *Memory) onHeld(ctx context.Context, op string, id ID, hookID string, rev uint64, fn func(e *memEntry, now time.Time) error) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.held(op, id, hookID, rev, now)
	if err != nil {
		return err
	}
	return fn(e, now)
}

// held returns the live entry under id at rev held by hookID, or protocol.ErrClaimLost.
// m.mu must be held.
func (m *Memory) held(op string, id ID, hookID string, rev uint64, now time.Time) (*memEntry, error) {
	e := m.live(memKeyOf(id), now)
	switch {
	case e == nil:
		return nil, fmt.Errorf("%w: %s: no claim", protocol.ErrClaimLost, op)
	case e.rev != rev:
		return nil, fmt.Errorf("%w: %s: revision %d, claim is at %d", protocol.ErrClaimLost, op, rev, e.rev)
	case e.hookID != hookID:
		return nil, fmt.Errorf("%w: %s: held by another hook id", protocol.ErrClaimLost, op)
	}
	return e, nil
}

// Settle commits the pending claim at rev held by hookID, as KV.Settle
// does; it gets a new revision.
func (m *Memory) Settle(ctx context.Context, id ID, hookID string, rev uint64, ttl time.Duration) error {
	return m.SettleOwn(ctx, id, hookID, "", rev, ttl)
}

// SettleOwn is Settle that keeps digest with the committed claim (see
// Store.SettleOwn): in memory the holder check costs nothing, so the store
// checks every caller.
func (m *Memory) SettleOwn(ctx context.Context, id ID, hookID, digest string, rev uint64, ttl time.Duration) error {
	if err := validateSettle(id, hookID, rev); err != nil {
		return err
	}
	if err := ValidateDigest(digest); err != nil {
		return err
	}
	ttl, err := normTTL(ttl)
	if err != nil {
		return err
	}
	return m.onHeld(ctx, "settle", id, hookID, rev, func(e *memEntry, now time.Time) error {
		if e.committed {
			return fmt.Errorf("%w: settle: already committed", protocol.ErrClaimLost)
		}
		m.rev++
		e.rev = m.rev
		e.committed = true
		e.digest = digest
		e.expires = now.Add(ttl)
		heap.Fix(&m.byExpiry, e.heapIdx)
		e.elem = m.committed.PushBack(e)
		return nil
	})
}

// StartClaim starts nothing: a claim in memory is done at once, by Claim.
func (m *Memory) StartClaim(id ID, hookID string, pendingTTL time.Duration) (StartedClaim, error) {
	return NotStartedClaim(), nil
}

// StartSettleOwn starts nothing: a settle in memory is done at once, by
// SettleOwn.
func (m *Memory) StartSettleOwn(id ID, hookID string, rev uint64, ttl time.Duration) (StartedSettle, error) {
	return NotStartedSettle(), nil
}

// Release drops the claim at rev held by hookID, pending or committed.
func (m *Memory) Release(ctx context.Context, id ID, hookID string, rev uint64) error {
	if err := validateSettle(id, hookID, rev); err != nil {
		return err
	}
	return m.onHeld(ctx, "release", id, hookID, rev, func(e *memEntry, _ time.Time) error {
		m.remove(e)
		return nil
	})
}

// Get reads the claim on id (StateAbsent when there is none or it
// expired).
func (m *Memory) Get(ctx context.Context, id ID) (State, error) {
	if err := id.Validate(); err != nil {
		return State{}, err
	}
	if err := ctxErr(ctx); err != nil {
		return State{}, err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.live(memKeyOf(id), now)
	if e == nil {
		return State{State: protocol.StateAbsent}, nil
	}
	st := protocol.StatePending
	if e.committed {
		st = protocol.StateCommitted
	}
	return State{State: st, HookID: e.hookID, Revision: e.rev, ExpiresIn: expiresIn(e.expires, now), Digest: e.digest}, nil
}

func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errUnavailable, err)
	}
	return nil
}

func (e *memEntry) expiry() time.Time { return e.expires }
func (e *memEntry) setIndex(i int)    { e.heapIdx = i }
