package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Syncer makes every write JetStream acknowledged before Sync was called
// durable on stable storage: a 2xx (or a granted reply that promises
// durability) is sent only after Sync returned nil. A nil Syncer, or
// NoSync, promises nothing beyond the ack (external NATS, a cluster,
// nats-server's own sync always).
type Syncer interface {
	Sync(ctx context.Context) error
}

// NoSync is the Syncer that returns at once: the ack is the promise.
var NoSync Syncer = noSync{}

type noSync struct{}

func (noSync) Sync(context.Context) error { return nil }

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
// from what is on disk). It wraps ErrUnavailable (a 503, never a 2xx).
var ErrSyncFailed = fmt.Errorf("%w: the store's sync failed (restart the node)", ErrUnavailable)

// ErrSyncClosed is returned by GroupSync.Sync after Close.
var ErrSyncClosed = fmt.Errorf("%w: the store's sync has stopped", ErrUnavailable)

// GroupSync is a group commit barrier: Sync waits for the next round of the
// round function to complete, and one round serves every caller that
// called Sync before it began (their acks came before it, so the round's
// syncs cover their writes). Callers arriving while rounds run gather for
// the next one, which starts as soon as fewer than DefaultSyncOverlap
// rounds run: under load, many callers share one round; alone, a caller
// waits for one round. One owned goroutine starts the rounds (each on a
// goroutine it waits for); Close stops them.
type GroupSync struct {
	round   func() error
	overlap int // rounds run at once (DefaultSyncOverlap)

	mu     sync.Mutex
	next   *syncRound // the round callers join (nil: none asked yet)
	failed error      // the first round error: every later Sync fails

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once

	rounds, failures, waits atomic.Uint64
	nanos                   atomic.Int64 // total time spent in rounds
}

type syncRound struct {
	done chan struct{}
	err  error
}

// DefaultSyncOverlap is how many rounds a GroupSync runs at once: callers
// arriving while a round runs start the next at once instead of waiting
// for it to end (a caller waits about one round, not one and a half),
// while under load each round still serves everyone who arrived meanwhile.
const DefaultSyncOverlap = 2

// NewGroupSync starts a barrier whose rounds call round (which must make
// every write acknowledged before it was called durable, or fail; it may
// run concurrently with itself, up to DefaultSyncOverlap times).
func NewGroupSync(round func() error) *GroupSync {
	g := &GroupSync{
		round:   round,
		overlap: DefaultSyncOverlap,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go g.loop()
	return g
}

// Sync waits until a round that began after this call has completed: nil
// when it succeeded, ErrSyncFailed (also for every later call) when any
// round failed, ctx's error when ctx ends first.
func (g *GroupSync) Sync(ctx context.Context) error {
	g.waits.Add(1)
	g.mu.Lock()
	if g.failed != nil {
		g.mu.Unlock()
		return g.failed
	}
	r := g.next
	if r == nil {
		r = &syncRound{done: make(chan struct{})}
		g.next = r
	}
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default: // a kick is pending: the loop will take r
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for the store's sync: %w", ErrUnavailable, ctx.Err())
	case <-g.done:
		return ErrSyncClosed
	}
}

func (g *GroupSync) loop() {
	defer close(g.done)
	var wg sync.WaitGroup
	defer wg.Wait() // rounds in flight finish before done
	finished := make(chan struct{}, g.overlap)
	running := 0
	for {
		select {
		case <-g.stop:
			return
		case <-g.kick:
		case <-finished:
			running--
		}
		for running < g.overlap {
			g.mu.Lock()
			r := g.next
			g.next = nil
			g.mu.Unlock()
			if r == nil {
				break
			}
			running++
			wg.Go(func() {
				g.run(r)
				finished <- struct{}{}
			})
		}
	}
}

// run runs one round for the callers of r.
func (g *GroupSync) run(r *syncRound) {
	t0 := time.Now()
	err := g.round()
	g.nanos.Add(int64(time.Since(t0)))
	g.rounds.Add(1)
	if err != nil {
		g.failures.Add(1)
		g.mu.Lock()
		if g.failed == nil {
			g.failed = fmt.Errorf("%w: %w", ErrSyncFailed, err)
		}
		r.err = g.failed
		g.mu.Unlock()
	}
	close(r.done)
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
}

// Stats returns the barrier's counters.
func (g *GroupSync) Stats() SyncStats {
	return SyncStats{Rounds: g.rounds.Load(), Failures: g.failures.Load(), Waits: g.waits.Load(), Time: time.Duration(g.nanos.Load())}
}

// IsSyncFailed reports whether err comes from a failed sync round.
func IsSyncFailed(err error) bool { return errors.Is(err, ErrSyncFailed) }
