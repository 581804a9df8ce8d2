package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/kvstore"
)

// replayRun claims distinct replay nonces through the service
// (sluice.v1.replay.claim) and samples the replay bucket's stream: it must
// never hold more than the capacity, and no more than capacity nonces may
// be answered "claimed" (they are retained for an hour: none expires).
type replayRun struct {
	capacity int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	claimed, already, full, failed atomic.Int64
	maxMsgs                        atomic.Int64
	mu                             sync.Mutex
	bad                            []string
}

func (h *Harness) startReplay(capacity int64, workers int) *replayRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &replayRun{capacity: capacity, cancel: cancel}
	retain := time.Now().Add(time.Hour).Unix()
	for w := range workers {
		r.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				key := "n-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				if i%5 == 4 {
					key = "n-" + strconv.Itoa(w) + "-0" // a replay of the first nonce
				}
				rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
				data, code, err := h.Request(rctx, "replay.claim", map[string]any{"namespace": "faults/replay", "key": key, "retain_until": retain})
				rcancel()
				if err != nil || code != "" {
					r.failed.Add(1)
					sleepCtx(ctx, 20*time.Millisecond)
					continue
				}
				var rep struct {
					Result string `json:"result"`
				}
				_ = json.Unmarshal(data, &rep)
				switch rep.Result {
				case "claimed":
					if n := r.claimed.Add(1); n > capacity {
						r.violation(fmt.Sprintf("%d nonces claimed, capacity %d", n, capacity))
					}
				case "already_claimed":
					r.already.Add(1)
				case "full":
					r.full.Add(1)
				default:
					r.violation(fmt.Sprintf("replay.claim answered %q", data))
				}
				sleepCtx(ctx, 2*time.Millisecond)
			}
		})
	}
	r.wg.Go(func() {
		js := h.JS()
		for ctx.Err() == nil {
			ictx, icancel := context.WithTimeout(ctx, 2*time.Second)
			if st, err := js.Stream(ictx, kvstore.StreamName(kvstore.BucketNames("sluice").Replay)); err == nil {
				if info, err := st.Info(ictx); err == nil {
					n := int64(info.State.Msgs)
					if n > r.maxMsgs.Load() {
						r.maxMsgs.Store(n)
					}
					if n > capacity {
						r.violation(fmt.Sprintf("replay stream holds %d messages, capacity %d", n, capacity))
					}
				}
			}
			icancel()
			sleepCtx(ctx, 50*time.Millisecond)
		}
	})
	return r
}

func (r *replayRun) violation(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) < 10 {
		r.bad = append(r.bad, s)
	}
}

func (r *replayRun) stop() []string {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad
}

func (r *replayRun) String() string {
	return fmt.Sprintf("replay (capacity %d): %d claimed, %d already claimed, %d full, %d failed; the stream held at most %d",
		r.capacity, r.claimed.Load(), r.already.Load(), r.full.Load(), r.failed.Load(), r.maxMsgs.Load())
}
