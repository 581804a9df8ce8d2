package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// Concurrent callers share rounds, and every caller is served by a round
// that began after it called (its acks came before that round's syncs).
func TestGroupSyncCoalesces(t *testing.T) {
	var calls atomic.Int64 // tickets of callers, taken before they call
	var mu sync.Mutex
	maxDone := int64(-1) // the largest ticket count a completed round saw at its start
	gate := make(chan struct{})
	g := kvstore.NewGroupSync(func() error {
		snap := calls.Load()
		<-gate // a round lasts until the test lets it end
		mu.Lock()
		maxDone = max(maxDone, snap)
		mu.Unlock()
		return nil
	})
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const callers = 200
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			ticket := calls.Add(1)
			if err := g.Sync(ctx); err != nil {
				errs <- err
				return
			}
			// The round that released it began after its call: it saw
			// the ticket.
			mu.Lock()
			done := maxDone
			mu.Unlock()
			if done < ticket {
				errs <- errors.New("a caller was released by a round that began before it called")
			}
		})
	}
	// Let rounds end until every caller is served (bounded by ctx).
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for loop := true; loop; {
		select {
		case gate <- struct{}{}:
		case <-finished:
			loop = false
		case <-ctx.Done():
			t.Fatal("callers not served in time")
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := g.Stats()
	if st.Waits != callers {
		t.Errorf("waits = %d, want %d", st.Waits, callers)
	}
	// While the first rounds are held, every other caller gathers for the
	// next: a handful of rounds, never one per caller.
	if st.Rounds > callers/10 {
		t.Errorf("%d rounds for %d concurrent callers: the barrier does not coalesce", st.Rounds, callers)
	}
	t.Logf("%d callers, %d rounds", callers, st.Rounds)
}

// A failed round fails its callers and every later one (ErrSyncFailed,
// an protocol.ErrUnavailable: a 503), and Err reports it.
func TestGroupSyncFailureLatches(t *testing.T) {
	eio := errors.New("input/output error")
	var fail atomic.Bool
	g := kvstore.NewGroupSync(func() error {
		if fail.Load() {
			return eio
		}
		return nil
	})
	defer g.Close()
	ctx := context.Background()
	if err := g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	err := g.Sync(ctx)
	if !errors.Is(err, kvstore.ErrSyncFailed) || !errors.Is(err, protocol.ErrUnavailable) || !errors.Is(err, eio) {
		t.Fatalf("failed round: %v", err)
	}
	fail.Store(false)
	if err := g.Sync(ctx); !errors.Is(err, kvstore.ErrSyncFailed) {
		t.Fatalf("after a failed round: %v, want ErrSyncFailed", err)
	}
	if g.Err() == nil {
		t.Fatal("Err() is nil after a failed round")
	}
}

// A round that failed with ErrRoundMissed fails its own callers only: the
// next round answers again.
func TestGroupSyncMissedRoundDoesNotLatch(t *testing.T) {
	var miss atomic.Bool
	g := kvstore.NewGroupSync(func() error {
		if miss.Load() {
			return fmt.Errorf("%w: server n2 did not answer", kvstore.ErrRoundMissed)
		}
		return nil
	})
	defer g.Close()
	ctx := context.Background()
	miss.Store(true)
	err := g.Sync(ctx)
	if !errors.Is(err, kvstore.ErrRoundMissed) || !errors.Is(err, protocol.ErrUnavailable) || errors.Is(err, kvstore.ErrSyncFailed) {
		t.Fatalf("missed round: %v", err)
	}
	miss.Store(false)
	if err := g.Sync(ctx); err != nil {
		t.Fatalf("the round after a missed one: %v", err)
	}
	if g.Err() != nil || g.Stats().Failures != 1 {
		t.Fatalf("Err() %v, failures %d: want nil, 1", g.Err(), g.Stats().Failures)
	}
}

// A round that vouched for some streams only fails the callers whose
// writes went to the others (ForScope), and the next round is whole.
func TestGroupSyncPartialRound(t *testing.T) {
	var partial atomic.Bool
	g := kvstore.NewGroupSync(func() error {
		if partial.Load() {
			return &kvstore.PartialSyncError{Err: errors.New("streams [HOOKS_2] unconfirmed"),
				Affects: func(s kvstore.SyncScope) bool { return s.Tenant == "t2" }}
		}
		return nil
	})
	defer g.Close()
	ctx := context.Background()
	partial.Store(true)
	err := g.Sync(ctx)
	if !errors.Is(err, kvstore.ErrRoundMissed) || !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("a partial round: %v", err)
	}
	if got := kvstore.ForScope(err, kvstore.SyncScope{Tenant: "t1"}); got != nil {
		t.Fatalf("a partial round for a tenant whose streams it vouched for: %v", got)
	}
	if got := kvstore.ForScope(err, kvstore.SyncScope{Tenant: "t2"}); got != err {
		t.Fatalf("a partial round for a tenant whose streams it did not vouch for: %v", got)
	}
	if got := kvstore.ForScope(kvstore.ErrSyncFailed, kvstore.SyncScope{Tenant: "t1"}); got != kvstore.ErrSyncFailed {
		t.Fatalf("a failed round for any scope: %v", got)
	}
	done := make(chan error, 1)
	kvstore.SyncThen(ctx, g, func(err error) { done <- kvstore.ForScope(err, kvstore.SyncScope{Tenant: "t1"}) })
	if err := <-done; err != nil {
		t.Fatalf("SyncThen, then ForScope: %v", err)
	}
	partial.Store(false)
	if err := g.Sync(ctx); err != nil || g.Err() != nil {
		t.Fatalf("the round after a partial one: %v (barrier %v)", err, g.Err())
	}
}

// Close releases waiting callers with ErrSyncClosed.
func TestGroupSyncClose(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	g := kvstore.NewGroupSync(func() error {
		once.Do(func() { close(entered) })
		<-release
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- g.Sync(context.Background()) }()
	<-entered
	second := make(chan error, 1)
	go func() { second <- g.Sync(context.Background()) }()
	close(release)
	g.Close()
	if err := <-done; err != nil {
		t.Fatalf("the round in progress: %v", err)
	}
	select {
	case err := <-second:
		if err != nil && !errors.Is(err, kvstore.ErrSyncClosed) {
			t.Fatalf("waiting at Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a caller waiting at Close was not released")
	}
	if err := g.Sync(context.Background()); !errors.Is(err, kvstore.ErrSyncClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// Then calls back on the barrier's goroutine after a round that began
// after the call, with what Sync would return: never from the round
// already running when it was called; ErrSyncClosed for a round Close
// left unrun; at once once the barrier has failed or closed.
func TestGroupSyncThen(t *testing.T) {
	started := make(chan int, 8)
	gate := make(chan struct{})
	var rounds atomic.Int64
	var fail atomic.Bool
	g := kvstore.NewGroupSync(func() error {
		started <- int(rounds.Add(1))
		<-gate
		if fail.Load() {
			return errors.New("input/output error")
		}
		return nil
	})
	got := make(chan error, 8)
	then := func(err error) { got <- err }
	wait := func(what string) error {
		t.Helper()
		return within(t, got, what+"'s callback")
	}

	g.Then(then) // starts round 1
	if n := within(t, started, "round 1 to start"); n != 1 {
		t.Fatalf("round %d started", n)
	}
	g.Then(then) // while round 1 runs: round 2's
	sendWithin(t, gate, "round 1 to take the gate")
	if err := wait("round 1"); err != nil {
		t.Fatal(err)
	}
	within(t, started, "round 2 to start")
	select {
	case err := <-got:
		t.Fatalf("the second callback came from round 1: %v", err)
	default:
	}
	fail.Store(true)
	sendWithin(t, gate, "round 2 to take the gate")
	if err := wait("round 2"); !errors.Is(err, kvstore.ErrSyncFailed) {
		t.Fatalf("a failed round: %v, want ErrSyncFailed", err)
	}
	g.Then(then) // after the failure: at once
	if err := wait("after the failure"); !errors.Is(err, kvstore.ErrSyncFailed) {
		t.Fatalf("after a failed round: %v", err)
	}
	g.Close()
	g.Then(then)
	if err := wait("after Close"); !errors.Is(err, kvstore.ErrSyncFailed) && !errors.Is(err, kvstore.ErrSyncClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// Close never loses a callback: one queued for the round after the one
// running is called once, with nil when that round still ran or
// ErrSyncClosed when Close stopped the loop first (under -race, as .ci/run
// runs it, both orders happen over the iterations: about half each).
func TestGroupSyncThenAtClose(t *testing.T) {
	var closedSeen int
	for range 50 {
		release := make(chan struct{})
		g, started := gatedSync(release)
		first, second := make(chan error, 2), make(chan error, 2)
		g.Then(func(err error) { first <- err })
		within(t, started, "round 1 to start")
		g.Then(func(err error) { second <- err }) // the next round's
		closed := make(chan struct{})
		go func() { g.Close(); close(closed) }()
		close(release) // round 1 ends; round 2, if it starts, does not block
		within(t, closed, "Close to return")
		if err := within(t, first, "round 1's callback"); err != nil {
			t.Fatalf("the round in progress: %v", err)
		}
		select {
		case err := <-second:
			if errors.Is(err, kvstore.ErrSyncClosed) {
				closedSeen++
			} else if err != nil {
				t.Fatalf("a callback of the next round: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a callback of the round Close left was never called")
		}
		if len(second) != 0 {
			t.Fatal("a callback was called twice")
		}
	}
	t.Logf("%d of 50 callbacks answered ErrSyncClosed", closedSeen)
}

// SyncThen answers a ThenSyncer's caller with protocol.ErrUnavailable when its ctx
// ends before the round (a stuck disk), and only once: the round's own
// callback, when it finally comes, calls nothing more.
func TestSyncThenDeadline(t *testing.T) {
	gate := make(chan struct{})
	g, started := gatedSync(gate)
	defer g.Close()
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	defer release() // before Close, even when the test fails early
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	got := make(chan error, 2)
	kvstore.SyncThen(ctx, g, func(err error) { got <- err })
	within(t, started, "the round to start")
	select {
	case err := <-got:
		if !errors.Is(err, protocol.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("past the deadline: %v, want errUnavailable and DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no callback at the deadline")
	}
	release() // the round ends: its callback must not call fn again
	if err := g.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("fn called twice: %v", <-got)
	}
	// Before its deadline, fn gets the round's outcome.
	ok := make(chan error, 1)
	kvstore.SyncThen(context.Background(), g, func(err error) { ok <- err })
	if err := within(t, ok, "a round in time"); err != nil {
		t.Fatalf("a round in time: %v", err)
	}
}

// gatedSync is a barrier whose rounds say on started that one began (the
// first, when several do) and last until gate is closed.
func gatedSync(gate <-chan struct{}) (*kvstore.GroupSync, <-chan struct{}) {
	started := make(chan struct{}, 1)
	return kvstore.NewGroupSync(func() error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-gate
		return nil
	}), started
}

// within receives from ch, failing the test after 10 s (what: what was
// awaited).
func within[V any](t *testing.T, ch <-chan V, what string) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
		var zero V
		return zero
	}
}

// sendWithin sends on ch, failing the test after 10 s.
func sendWithin(t *testing.T, ch chan<- struct{}, what string) {
	t.Helper()
	select {
	case ch <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
	}
}

// A caller who joined while a round failed is answered by the next round
// with the failure, and no round runs again: its write may have come
// before the failing round began, and the failed sync may have dropped
// its pages, so no later round can vouch for it.
func TestGroupSyncFailureReachesTheRoundAfter(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan int, 4)
	var rounds atomic.Int64
	g := kvstore.NewGroupSync(func() error {
		n := int(rounds.Add(1))
		started <- n
		<-gate
		if n == 1 {
			return errors.New("input/output error")
		}
		return nil
	})
	defer g.Close()
	first := make(chan error, 1)
	go func() { first <- g.Sync(context.Background()) }()
	within(t, started, "round 1 to start")
	then := make(chan error, 1)
	g.Then(func(err error) { then <- err }) // round 2's
	blocked := make(chan error, 1)
	go func() { blocked <- g.Sync(context.Background()) }()
	// The blocked caller must have joined before round 1 ends.
	testkit.Eventually(t, 10*time.Second, func() bool { return g.Stats().Waits == 3 }, "the third caller to join")
	close(gate)
	if err := within(t, first, "round 1's caller"); !errors.Is(err, kvstore.ErrSyncFailed) {
		t.Fatalf("round 1: %v, want ErrSyncFailed", err)
	}
	if err := within(t, then, "round 2's callback"); !errors.Is(err, kvstore.ErrSyncFailed) {
		t.Fatalf("a callback that joined during the failed round: %v, want ErrSyncFailed", err)
	}
	if err := within(t, blocked, "round 2's caller"); !errors.Is(err, kvstore.ErrSyncFailed) {
		t.Fatalf("a caller that joined during the failed round: %v, want ErrSyncFailed", err)
	}
	if n := rounds.Load(); n != 1 {
		t.Fatalf("%d rounds ran, want 1: no round runs after a failure", n)
	}
}

// A SyncThen caller answered at its deadline while the round is stuck is
// forgotten by the barrier: what its callback holds can be collected (a
// stuck disk under load must not grow the heap by every frame).
func TestSyncThenForgetsAtTheDeadline(t *testing.T) {
	gate := make(chan struct{})
	g, started := gatedSync(gate)
	defer g.Close()
	defer close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	kvstore.SyncThen(context.Background(), g, func(error) {}) // round 1: stuck
	within(t, started, "the stuck round to start")

	collected := make(chan struct{})
	got := make(chan error, 1)
	func() {
		held := new([1 << 20]byte)
		runtime.AddCleanup(held, func(struct{}) { close(collected) }, struct{}{})
		kvstore.SyncThen(ctx, g, func(err error) { got <- fmt.Errorf("%w (%d)", err, held[0]) })
	}()
	if err := within(t, got, "the answer at the deadline"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("at the deadline: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-collected:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the barrier still holds the callback of a caller answered at its deadline")
		}
	}
}

// A caller is released only once a round that began after its call has
// finished: never at the round's start, while its fsync still runs. The
// round takes a little while (a slow fdatasync; the power-cut harness's
// fsync returns at once, so there no caller could be released early), and
// each caller checks, when Sync returns, that such a round has ended.
func TestGroupSyncReleasesOnlyAfterTheRound(t *testing.T) {
	var started, finished atomic.Int64 // rounds
	g := kvstore.NewGroupSync(func() error {
		started.Add(1)
		time.Sleep(2 * time.Millisecond) // the fsync's latency
		finished.Add(1)
		return nil
	})
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for range 5 {
				// No round that began before this call can release it:
				// the one that does is at least round began+1.
				began := started.Load()
				if err := g.Sync(ctx); err != nil {
					errs <- err
					return
				}
				if n := finished.Load(); n <= began {
					errs <- fmt.Errorf("released with %d rounds finished, none of them begun after the call (%d had begun): before its round's sync ended", n, began)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ch := make(chan struct{}) // the Then path too
	var got atomic.Int64
	began := started.Load()
	g.Then(func(error) { got.Store(finished.Load()); close(ch) })
	within(t, ch, "the callback")
	if got.Load() <= began {
		t.Fatalf("Then called back with %d rounds finished (%d had begun): before its round's sync ended", got.Load(), began)
	}
}

// Stats counts each round in the bucket of its length: a round that
// returns at once lands under the lowest bounds, one that lasts 300 ms
// above the 250 ms bound, and the buckets hold every round.
func TestGroupSyncRoundLengths(t *testing.T) {
	var slow atomic.Bool
	g := kvstore.NewGroupSync(func() error {
		if slow.Load() {
			time.Sleep(300 * time.Millisecond) // the round's length is what is measured
		}
		return nil
	})
	defer g.Close()
	ctx := context.Background()
	for range 3 {
		if err := g.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	slow.Store(true)
	if err := g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	s := g.Stats()
	bounds := kvstore.SyncRoundBounds()
	if len(s.Lengths) != len(bounds)+1 {
		t.Fatalf("%d buckets for %d bounds", len(s.Lengths), len(bounds))
	}
	var total, over uint64
	for i, n := range s.Lengths {
		total += n
		if i == len(bounds) || bounds[i] > 250*time.Millisecond {
			over += n
		}
	}
	if total != s.Rounds || s.Rounds != 4 {
		t.Fatalf("buckets %v hold %d rounds, Rounds %d: want 4", s.Lengths, total, s.Rounds)
	}
	if over != 1 {
		t.Fatalf("buckets %v (bounds %v): want the 300 ms round, alone, above 250 ms", s.Lengths, bounds)
	}
	if s.Time < 300*time.Millisecond {
		t.Fatalf("time in rounds %v: the slow round lasted 300 ms", s.Time)
	}
}
