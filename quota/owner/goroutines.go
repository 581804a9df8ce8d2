package owner

import (
	"context"
	"sync"
	"time"
)

// tracker counts goroutines and lets one wait until none is left. Once
// closed, it admits no more.
type tracker struct {
	mu     sync.Mutex
	n      int
	closed bool
	zero   chan struct{}
}

// add admits one more goroutine; false once closed.
func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.n == 0 {
		t.zero = make(chan struct{})
	}
	t.n++
	return true
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		close(t.zero)
	}
	t.mu.Unlock()
}

// close stops admitting goroutines.
func (t *tracker) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

// idle reports whether no goroutine is tracked.
func (t *tracker) idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n == 0
}

// wait returns when no goroutine is tracked, or ctx's error.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return nil
	}
	z := t.zero
	t.mu.Unlock()
	select {
	case <-z:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runnerIdle is how long an idle runner waits for work before it exits.
const runnerIdle = time.Second

// runners runs KV-bound work on reused goroutines: a claim's call chain
// grows a fresh goroutine's stack every time, which costs more than the
// create's own CPU on a busy owner. A runner idle for runnerIdle exits. The
// zero value works (without quit, runners end only by idling).
type runners struct {
	jobs chan func() // unbuffered: a send succeeds when a runner is idle
	quit chan struct{}
	wg   sync.WaitGroup
}

func newRunners() runners {
	return runners{jobs: make(chan func()), quit: make(chan struct{})}
}

// run runs fn on an idle runner or a new one.
func (r *runners) run(fn func()) {
	select {
	case r.jobs <- fn:
	default:
		r.wg.Add(1)
		go r.loop(fn)
	}
}

func (r *runners) loop(fn func()) {
	defer r.wg.Done()
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		fn()
		fn = nil
		idle.Reset(runnerIdle)
		select {
		case fn = <-r.jobs:
		case <-idle.C:
			return
		case <-r.quit:
			return
		}
	}
}

// stop ends idle runners, and with wait waits for all (no run may follow).
func (r *runners) stop(wait bool) {
	if r.quit != nil {
		close(r.quit)
	}
	if wait {
		r.wg.Wait()
	}
}
