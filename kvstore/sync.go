package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Syncer makes every write JetStream acknowledged before Sync was called
// durable on stable storage: a 2xx (or a granted reply that promises
// durability) is sent only after Sync returned nil. A nil Syncer promises
// nothing beyond the ack: the modes of package durability without a
// barrier (external NATS, acked, nats-server's own fsync of every write).
type Syncer interface {
	Sync(ctx context.Context) error
}

// ThenSyncer is a Syncer that can also call back instead of blocking: Then
// calls fn with what Sync would have returned, on the barrier's goroutine
// once a round that began after the call has completed, saving a wake-up
// per round. fn must not block. forget drops fn for a caller that stopped
// waiting (fn may still be called if its round was already answering).
type ThenSyncer interface {
	Syncer
	Then(fn func(error)) (forget func())
}

// SyncThen calls fn once with what Sync(ctx) would return: nil at once for
// a nil s; through Then for a ThenSyncer, or with protocol.ErrUnavailable when ctx
// ends first (a stuck round does not hold fn past ctx); else after Sync.
// The caller keeps ctx alive until fn is called.
func SyncThen(ctx context.Context, s Syncer, fn func(error)) {
	switch t := s.(type) {
	case nil:
		fn(nil)
	case ThenSyncer:
		var once sync.Once
		call := func(err error) { once.Do(func() { fn(err) }) }
		// At ctx's end the callback is forgotten, so a round that never
		// ends keeps nothing of a caller already answered.
		var forget atomic.Pointer[func()]
		stop := context.AfterFunc(ctx, func() {
			if f := forget.Load(); f != nil {
				(*f)()
			}
			call(waitErr(ctx))
		})
		f := t.Then(func(err error) {
			stop()
			call(err)
		})
		forget.Store(&f)
		if ctx.Err() != nil {
			f() // ctx may have ended before the watch could see f
		}
	default:
		fn(s.Sync(ctx))
	}
}

// waitErr is a sync wait's error when ctx ended first.
func waitErr(ctx context.Context) error {
	return fmt.Errorf("%w: waiting for the store's sync: %w", errUnavailable, ctx.Err())
}

// SyncWith calls s.Sync, or returns nil for a nil s.
func SyncWith(ctx context.Context, s Syncer) error {
	if s == nil {
		return nil
	}
	return s.Sync(ctx)
}

// ErrSyncFailed is returned by GroupSync.Sync once a round of syncs has
// failed: after a failed fsync the kernel may have dropped the dirty pages,
// so no later round can vouch for them; the node must restart (and recover
// from what is on disk). It wraps protocol.ErrUnavailable (a 503, never a 2xx).
var ErrSyncFailed = fmt.Errorf("%w: the store's sync failed (restart the node)", errUnavailable)

// ErrRoundMissed marks a round error that fails that round only: the
// round could not vouch for its callers' writes (a cluster node's round
// that a server did not answer in time), but nothing was lost that a later
// round cannot cover, so the barrier goes on. It wraps protocol.ErrUnavailable.
var ErrRoundMissed = fmt.Errorf("%w: the store's sync round was not confirmed", errUnavailable)

// SyncScope is what a caller's writes went to, for a barrier that can vouch
// for some streams and not others (a cluster's, with a server down): the
// streams of a tenant's shard, the replay nonces' bucket, the dead letters'
// stream.
type SyncScope struct {
	Tenant      string // "": no shard's streams
	Replay      bool
	DeadLetters bool
}

// PartialSyncError is a round that vouched for some streams' writes and not
// others'; Affects reports whether a scope's writes went to any of the
// others. It is an ErrRoundMissed.
type PartialSyncError struct {
	Err     error
	Affects func(SyncScope) bool
}

func (e *PartialSyncError) Error() string   { return e.Err.Error() }
func (e *PartialSyncError) Unwrap() []error { return []error{ErrRoundMissed, e.Err} }

// ForScope is a barrier's answer err (Sync's, SyncThen's) to a caller
// whose writes went to scope only: nil when err is a PartialSyncError
// that vouched for all of them, else err.
func ForScope(err error, scope SyncScope) error {
	var p *PartialSyncError
	if errors.As(err, &p) && !p.Affects(scope) {
		return nil
	}
	return err
}

// ErrSyncClosed is returned by GroupSync.Sync after Close.
var ErrSyncClosed = fmt.Errorf("%w: the store's sync has stopped", errUnavailable)

// GroupSync is a group sync barrier: Sync waits for the next round of the
// round function, and one round serves every caller that called Sync before
// it began. Callers arriving during a round gather for the next, which
// begins as soon as it ends. One owned goroutine runs the rounds on itself
// (no goroutine per round; the only hand-off is waking each round's
// callers); Close stops it.
type GroupSync struct {
	round func() error

	mu     sync.Mutex
	next   *syncRound // the round callers join (nil: none asked yet)
	failed error      // the first round error: every later Sync fails
	closed bool       // the loop has ended: nobody runs rounds

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once

	rounds, failures, waits atomic.Uint64
	nanos                   atomic.Int64 // total time spent in rounds
	// lengths counts rounds by length: [i] those not longer than
	// SyncRoundBounds()[i] and longer than the bound before; the last,
	// those longer than every bound.
	lengths [roundBounds + 1]atomic.Uint64
	thenSeq uint64 // keys of syncRound.then (g.mu)
}

type syncRound struct {
	done chan struct{}
	err  error
	// then are the callbacks (by key: a forgotten one is deleted), called
	// after done is closed, on the loop's goroutine; nil once taken (g.mu).
	then map[uint64]func(error)
}

// NewGroupSync starts a barrier whose rounds call round (which must make
// every write acknowledged before it was called durable, or fail). Rounds
// never overlap: overlapping rounds were smaller and slower, each round's
// fdatasync waiting for the other's journal commit (docs/BENCHMARKS.md).
func NewGroupSync(round func() error) *GroupSync {
	g := &GroupSync{
		round: round,
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go g.loop()
	return g
}

// Sync waits until a round that began after this call has completed: nil
// when it succeeded, ErrSyncFailed (also for every later call) when any
// round failed, ctx's error when ctx ends first.
func (g *GroupSync) Sync(ctx context.Context) error {
	r, _, err := g.join(nil)
	if r == nil {
		return err
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return waitErr(ctx)
	case <-g.done:
		return ErrSyncClosed
	}
}

// Then calls fn, on the barrier's goroutine, with what Sync would return
// once a round that began after this call has completed (ThenSyncer); at
// once, on the caller's goroutine, when the barrier has failed or closed.
// forget drops fn if its round has not taken it yet.
func (g *GroupSync) Then(fn func(error)) (forget func()) {
	r, key, err := g.join(fn)
	if r == nil {
		fn(err)
		return func() {}
	}
	return func() {
		g.mu.Lock()
		delete(r.then, key) // a no-op once the round took them
		g.mu.Unlock()
	}
}

// join adds a caller (with fn, a callback, under key) to the next round
// and kicks the loop: the round, or nil and the error that answers at once.
func (g *GroupSync) join(fn func(error)) (r *syncRound, key uint64, err error) {
	g.waits.Add(1)
	g.mu.Lock()
	if g.failed != nil {
		g.mu.Unlock()
		return nil, 0, g.failed
	}
	if g.closed {
		g.mu.Unlock()
		return nil, 0, ErrSyncClosed
	}
	r = g.next
	if r == nil {
		r = &syncRound{done: make(chan struct{})}
		g.next = r
	}
	if fn != nil {
		if r.then == nil {
			r.then = make(map[uint64]func(error))
		}
		g.thenSeq++
		key = g.thenSeq
		r.then[key] = fn
	}
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default: // a kick is pending: the loop will take r
	}
	return r, key, nil
}

func (g *GroupSync) loop() {
	defer close(g.done)
	defer g.closeNext()
	for {
		g.mu.Lock()
		r := g.next
		g.next = nil
		g.mu.Unlock()
		if r != nil {
			g.run(r)
			select {
			case <-g.stop:
				return
			default:
				continue // whoever arrived meanwhile: the next round at once
			}
		}
		select {
		case <-g.stop:
			return
		case <-g.kick:
		}
	}
}

// run runs one round for the callers of r. Once a round has failed, no
// round runs again and every later one answers the failure: a caller who
// joined while the failing round ran may have written before it began,
// and the failed sync may have dropped that write's pages. A round that
// failed with ErrRoundMissed fails its own callers only.
func (g *GroupSync) run(r *syncRound) {
	g.mu.Lock()
	failed := g.failed
	g.mu.Unlock()
	var missed error
	if failed == nil {
		t0 := time.Now()
		err := g.round()
		d := time.Since(t0)
		g.nanos.Add(int64(d))
		g.lengths[roundBucket(d)].Add(1)
		g.rounds.Add(1)
		switch {
		case errors.Is(err, ErrRoundMissed):
			g.failures.Add(1)
			missed = err
		case err != nil:
			g.failures.Add(1)
			g.mu.Lock()
			g.failed = fmt.Errorf("%w: %w", ErrSyncFailed, err)
			g.mu.Unlock()
		}
	}
	g.mu.Lock()
	r.err = g.failed
	if missed != nil {
		r.err = missed
	}
	then := r.then
	r.then = nil
	g.mu.Unlock()
	close(r.done)
	for _, fn := range then {
		fn(r.err)
	}
}

// closeNext ends the barrier's loop: no caller joins a round any more,
// and the callbacks of the round nobody will run get ErrSyncClosed (its
// blocked callers see g.done).
func (g *GroupSync) closeNext() {
	g.mu.Lock()
	g.closed = true
	var then map[uint64]func(error)
	if r := g.next; r != nil {
		then, r.then = r.then, nil
	}
	g.next = nil
	g.mu.Unlock()
	for _, fn := range then {
		fn(ErrSyncClosed)
	}
}

// Close stops the barrier: waiting and later callers get ErrSyncClosed.
func (g *GroupSync) Close() {
	g.once.Do(func() { close(g.stop) })
	<-g.done
}

// Err is the error that stopped the barrier (nil: healthy).
func (g *GroupSync) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failed
}

// SyncStats are a GroupSync's counters.
type SyncStats struct {
	Rounds   uint64        // rounds run
	Failures uint64        // rounds that failed
	Waits    uint64        // Sync calls
	Time     time.Duration // total time in rounds
	// Lengths counts the rounds by length, one count per bound of
	// SyncRoundBounds (the rounds not longer than it and longer than the
	// bound before), then the rounds longer than every bound. Read apart
	// from Rounds: their sum may differ from it by the rounds ending
	// meanwhile.
	Lengths []uint64
}

// roundBounds is how many bounds SyncRoundBounds has.
const roundBounds = 13

// syncRoundBounds are SyncRoundBounds: from a lone fdatasync on a fast
// device (0.1 ms) to the device's stalls (1 s).
func syncRoundBounds() [roundBounds]time.Duration {
	return [...]time.Duration{
		100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
		time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
		25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
		500 * time.Millisecond, time.Second,
	}
}

// SyncRoundBounds are the upper bounds of SyncStats.Lengths' buckets.
func SyncRoundBounds() []time.Duration {
	b := syncRoundBounds()
	return b[:]
}

// roundBucket is the index in GroupSync.lengths of a round that took d.
func roundBucket(d time.Duration) int {
	b := syncRoundBounds()
	i, _ := slices.BinarySearch(b[:], d)
	return i
}

// Stats returns the barrier's counters.
func (g *GroupSync) Stats() SyncStats {
	s := SyncStats{Rounds: g.rounds.Load(), Failures: g.failures.Load(), Waits: g.waits.Load(), Time: time.Duration(g.nanos.Load()),
		Lengths: make([]uint64, len(g.lengths))}
	for i := range g.lengths {
		s.Lengths[i] = g.lengths[i].Load()
	}
	return s
}
