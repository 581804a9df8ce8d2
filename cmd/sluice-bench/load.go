package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// outcome classifies one completed operation.
type outcome uint8

const (
	outOK outcome = iota
	outLimited
	outDuplicate
	outPending
	outError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "rate_limited", "duplicate", "pending", "error"}

// opFunc performs one operation; seq is unique across every call of one
// opFunc (the caller of runLoad keeps the counter across slices).
type opFunc func(ctx context.Context, seq uint64) outcome

// loadResult is what one closed-loop run measured.
type loadResult struct {
	Ops      uint64
	Elapsed  time.Duration
	Hist     *hist
	Outcomes [numOutcomes]uint64
	FirstErr string
}

// window is called at the edges of the measurement window (CPU sampling).
type window struct {
	start, end func()
}

// runLoad keeps inflight operations in flight (closed loop: each goroutine
// issues its next op when the previous one returns) for warmup, then
// measures for dur. Only ops that complete inside the window are counted.
// seq numbers the ops (keys derived from it must stay unique: pass the same
// counter to every run of one op).
// Every op must be bounded in time by itself (client budgets); ctx ending
// stops the run early.
func runLoad(ctx context.Context, inflight int, warmup, dur time.Duration, seq *atomic.Uint64, op opFunc, w window, errText func() string) loadResult {
	const (
		phaseWarm int32 = iota
		phaseMeasure
		phaseStop
	)
	var phase atomic.Int32
	type local struct {
		h   hist
		out [numOutcomes]uint64
	}
	locals := make([]*local, inflight)
	var wg sync.WaitGroup
	for i := range inflight {
		l := &local{}
		locals[i] = l
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p := phase.Load()
				if p == phaseStop {
					return
				}
				t0 := time.Now()
				o := op(ctx, seq.Add(1))
				lat := time.Since(t0)
				if phase.Load() == phaseMeasure {
					l.h.record(lat)
					l.out[o]++
				}
			}
		}()
	}
	sleep(ctx, warmup)
	if w.start != nil {
		w.start()
	}
	t1 := time.Now()
	phase.Store(phaseMeasure)
	sleep(ctx, dur)
	phase.Store(phaseStop)
	elapsed := time.Since(t1)
	if w.end != nil {
		w.end()
	}
	wg.Wait()
	res := loadResult{Elapsed: elapsed, Hist: &hist{}}
	for _, l := range locals {
		res.Hist.merge(&l.h)
		for o, n := range l.out {
			res.Outcomes[o] += n
		}
	}
	res.Ops = res.Hist.total
	if res.Outcomes[outError] > 0 && errText != nil {
		res.FirstErr = errText()
	}
	return res
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// firstError remembers the first error reported to it.
type firstError struct {
	once sync.Once
	msg  atomic.Value
}

func (f *firstError) set(err error) {
	f.once.Do(func() { f.msg.Store(err.Error()) })
}

func (f *firstError) String() string {
	if s, ok := f.msg.Load().(string); ok {
		return s
	}
	return ""
}
