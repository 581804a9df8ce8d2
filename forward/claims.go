package forward

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/protocol"
)

// Claims is a leaf's dedupe claim store: the hub's claims bucket while
// the link is up and it answers, the leaf's own otherwise (docs/DESIGN.md
// "Leaf mode"). Revisions are per bucket, so Claims remembers the hook ids
// it claimed on the hub until they are settled or released.
type Claims struct {
	local  claims.Store
	hub    func(ctx context.Context) (claims.Store, error) // the hub's store (opened on first use)
	linked func() bool
	mu     sync.Mutex
	onHub  map[string]struct{} // hook ids of pending claims taken on the hub
}

// maxOnHub bounds the hook ids remembered; beyond it (hooks never settled
// nor released: a crash mid-request) the map starts over, and a settle of a
// forgotten claim fails as lost like any lost settle (202 all the same; the
// hub's pending claim expires).
const maxOnHub = 1 << 16

// NewClaims returns the leaf store over local (the leaf's bucket) and the
// hub's store, which hub opens (called again after an error).
func NewClaims(local claims.Store, hub func(ctx context.Context) (claims.Store, error), linked func() bool) *Claims {
	return &Claims{local: local, hub: hub, linked: linked, onHub: map[string]struct{}{}}
}

// hubStore is the hub's store when the link is up and it can be opened
// within ctx (the hub's share of the caller's budget: opening it waits
// for an attempt under way, and must not eat the leaf's share).
func (c *Claims) hubStore(ctx context.Context) claims.Store {
	if !c.linked() {
		return nil
	}
	s, err := c.hub(ctx)
	if err != nil {
		return nil
	}
	return s
}

// Claim takes the claim on the hub while it answers within half of ctx's
// budget — opening the hub's store included — else on the leaf, which
// keeps the other half whatever the hub does.
func (c *Claims) Claim(ctx context.Context, id claims.ID, hookID string, pendingTTL time.Duration) (claims.Result, error) {
	hctx, cancel := halfBudget(ctx)
	defer cancel()
	if hub := c.hubStore(hctx); hub != nil {
		res, err := hub.Claim(hctx, id, hookID, pendingTTL)
		cancel()
		if err == nil {
			if res.Outcome == claims.OK {
				c.takenOnHub(hookID)
			}
			return res, nil
		}
		if !errors.Is(err, protocol.ErrUnavailable) {
			return res, err
		}
	}
	return c.local.Claim(ctx, id, hookID, pendingTTL)
}

// takenOnHub records that hookID's pending claim is in the hub's bucket.
func (c *Claims) takenOnHub(hookID string) {
	c.mu.Lock()
	if len(c.onHub) >= maxOnHub {
		c.onHub = map[string]struct{}{}
	}
	c.onHub[hookID] = struct{}{}
	c.mu.Unlock()
}

// halfBudget is ctx with half of what is left of its deadline (ctx itself
// without one).
func halfBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, time.Now().Add(time.Until(dl)/2))
}

// where returns the store that holds hookID's claim, forgetting it when
// done is set.
func (c *Claims) where(ctx context.Context, hookID string, done bool) claims.Store {
	c.mu.Lock()
	_, ok := c.onHub[hookID]
	if ok && done {
		delete(c.onHub, hookID)
	}
	c.mu.Unlock()
	if !ok {
		return c.local
	}
	s, err := c.hub(ctx)
	if err != nil {
		return c.local
	}
	return s
}

// Settle settles the claim where it was taken.
func (c *Claims) Settle(ctx context.Context, id claims.ID, hookID string, rev uint64, ttl time.Duration) error {
	return c.where(ctx, hookID, true).Settle(ctx, id, hookID, rev, ttl)
}

// SettleOwn settles in one write where the claim was taken (an
// Idempotency-Key's digest is kept on the hub too).
func (c *Claims) SettleOwn(ctx context.Context, id claims.ID, hookID, digest string, rev uint64, ttl time.Duration) error {
	return c.where(ctx, hookID, true).SettleOwn(ctx, id, hookID, digest, rev, ttl)
}

// StartClaim starts nothing: where a claim goes is Claim's to decide (the
// hub while it answers, else the leaf).
func (c *Claims) StartClaim(claims.ID, string, time.Duration) (claims.StartedClaim, error) {
	return claims.NotStartedClaim(), nil
}

// StartSettleOwn starts nothing: SettleOwn finds where the claim was taken.
func (c *Claims) StartSettleOwn(claims.ID, string, uint64, time.Duration) (claims.StartedSettle, error) {
	return claims.NotStartedSettle(), nil
}

// Release releases the claim where it was taken.
func (c *Claims) Release(ctx context.Context, id claims.ID, hookID string, rev uint64) error {
	return c.where(ctx, hookID, true).Release(ctx, id, hookID, rev)
}

// Get reads the claim from the hub while it answers within half of ctx's
// budget, else from the leaf.
func (c *Claims) Get(ctx context.Context, id claims.ID) (claims.State, error) {
	hctx, cancel := halfBudget(ctx)
	defer cancel()
	if hub := c.hubStore(hctx); hub != nil {
		st, err := hub.Get(hctx, id)
		cancel()
		if err == nil || !errors.Is(err, protocol.ErrUnavailable) {
			return st, err
		}
	}
	return c.local.Get(ctx, id)
}

// Lazy opens a store on first use (the hub's, which may be away when the
// leaf starts) and keeps it. Callers arriving during an attempt wait for
// it (within their ctx) rather than claim on the leaf while the hub is
// about to answer; after a failure the next attempt is made 250 ms later at
// the earliest, and callers meanwhile get its error at once.
type Lazy struct {
	open  func(ctx context.Context) (claims.Store, error)
	s     atomic.Pointer[claims.Store]
	lock  chan struct{} // a mutex callers can stop waiting for
	last  time.Time     // of the last failed attempt (under lock)
	err   error         // its error (under lock)
	every time.Duration
}

// NewLazy returns a Lazy over open.
func NewLazy(open func(ctx context.Context) (claims.Store, error)) *Lazy {
	return &Lazy{open: open, lock: make(chan struct{}, 1), every: 250 * time.Millisecond}
}

// Get returns the store, opening it when it is not yet open.
func (l *Lazy) Get(ctx context.Context) (claims.Store, error) {
	if s := l.s.Load(); s != nil {
		return *s, nil
	}
	select {
	case l.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("claims: store %w: the hub's claims store: %w", protocol.ErrUnavailable, ctx.Err())
	}
	defer func() { <-l.lock }()
	if s := l.s.Load(); s != nil {
		return *s, nil
	}
	if l.err != nil && time.Since(l.last) < l.every {
		return nil, l.err
	}
	s, err := l.open(ctx)
	if err != nil {
		l.last, l.err = time.Now(), fmt.Errorf("claims: store %w: %w", protocol.ErrUnavailable, err)
		return nil, l.err
	}
	l.s.Store(&s)
	return s, nil
}
