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
// (sluice.v1.replay.claim) and replays earlier ones, tracking every nonce
// by identity: a fresh nonce must be answered "claimed" (it was never sent
// before: "already_claimed" would be a false replay), a replayed nonce
// that was answered "claimed" must be answered "already_claimed" (a second
// "claimed" lets a replay through), and "full" never (the capacity is
// chosen above the run's volume). It also samples the replay bucket's
// stream: never more messages than the capacity.
type replayRun struct {
	capacity int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	claimed, already, replays, failed atomic.Int64
	maxMsgs                           atomic.Int64
	mu                                sync.Mutex
	seen                              map[string]bool // nonces answered "claimed"
	bad                               []string
}

func (h *Harness) startReplay(capacity int64, workers int) *replayRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &replayRun{capacity: capacity, cancel: cancel, seen: map[string]bool{}}
	retain := time.Now().Add(time.Hour).Unix()
	for w := range workers {
		r.wg.Go(func() {
			var mine []string // this worker's nonces answered "claimed"
			for i := 0; ctx.Err() == nil; i++ {
				key, replay := "n-"+strconv.Itoa(w)+"-"+strconv.Itoa(i), false
				if i%5 == 4 && len(mine) > 0 {
					// A replay of an earlier nonce: the oldest, then ever
					// newer ones, so nonces claimed before a kill are
					// replayed after it.
					key, replay = mine[(i/5)%len(mine)], true
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
				switch {
				case rep.Result == "claimed" && !replay:
					r.claimed.Add(1)
					mine = append(mine, key)
					r.mu.Lock()
					twice := r.seen[key]
					r.seen[key] = true
					r.mu.Unlock()
					if twice {
						r.violation(fmt.Sprintf("nonce %s answered claimed twice", key))
					}
				case rep.Result == "claimed":
					r.violation(fmt.Sprintf("replay of nonce %s answered claimed", key))
				case rep.Result == "already_claimed" && replay:
					r.replays.Add(1)
				case rep.Result == "already_claimed":
					r.already.Add(1)
					r.violation(fmt.Sprintf("fresh nonce %s answered already_claimed", key))
				default:
					r.violation(fmt.Sprintf("replay.claim of %s (capacity %d above the run's volume) answered %q", key, capacity, data))
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
	return fmt.Sprintf("replay (capacity %d): %d nonces claimed, %d replays refused, %d fresh nonces refused, %d calls failed; the stream held at most %d",
		r.capacity, r.claimed.Load(), r.replays.Load(), r.already.Load(), r.failed.Load(), r.maxMsgs.Load())
}

// Claimed is the number of nonces answered "claimed".
func (r *replayRun) Claimed() int64 { return r.claimed.Load() }
