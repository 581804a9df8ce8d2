package kvstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Follower follows every key of a bucket from one goroutine, which it owns
// until Stop.
type Follower struct {
	stop context.CancelFunc
	done chan struct{}
	once sync.Once
}

// Follow watches every key of kv and calls apply for each entry (puts,
// deletes and purges alike; initial is true for the values present at the
// start), in order, from one goroutine, and loaded (when not nil) from
// that goroutine once the initial values are applied. It returns after
// loaded, or with ctx's error (the follower then stopped).
func Follow(ctx context.Context, kv jetstream.KeyValue, apply func(e jetstream.KeyValueEntry, initial bool), loaded func()) (*Follower, error) {
	wctx, cancel := context.WithCancel(context.Background())
	f := &Follower{stop: cancel, done: make(chan struct{})}
	w, err := kv.WatchAll(wctx)
	if err != nil {
		cancel()
		close(f.done)
		return nil, fmt.Errorf("kvstore: watch %s: %w", kv.Bucket(), MapError(err))
	}
	ready := make(chan struct{})
	go func() {
		// Stop's promise is that apply is not called again: done closes as
		// the loop ends. The watcher is stopped after, because deleting its
		// consumer waits out a whole API timeout on a connection to a server
		// going away (the request ends at once when the connection closes).
		defer func() { _ = w.Stop() }()
		defer close(f.done)
		initial := true
		for {
			select {
			case <-wctx.Done():
				return
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					return
				case e == nil: // end of the initial values
					if initial {
						initial = false
						if loaded != nil {
							loaded()
						}
						close(ready)
					}
				default:
					apply(e, initial)
				}
			}
		}
	}()
	select {
	case <-ready:
		return f, nil
	case <-ctx.Done():
		f.Stop()
		return nil, ctx.Err()
	}
}

// Stop ends the watch and waits until apply and loaded are no longer
// called; the watch's consumer is deleted in the background. It is
// idempotent.
func (f *Follower) Stop() {
	f.once.Do(f.stop)
	<-f.done
}
