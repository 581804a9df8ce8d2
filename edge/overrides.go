package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
)

// Overrides holds the fleet-wide per-tenant limit overrides set through the
// admin API. They live in a KV bucket (so they survive restarts and every
// node sees them) and are cached in memory, kept current by a KV watcher, so
// the request path never waits on KV for them.
type Overrides struct {
	b   *kvstore.Bucket
	log *slog.Logger

	mu    sync.RWMutex
	cache map[string]Limits
	ready chan struct{}

	stop   context.CancelFunc
	done   chan struct{}
	closer sync.Once
}

// NewOverrides returns an Overrides on bucket b. Call Start to load and
// follow the bucket.
func NewOverrides(b *kvstore.Bucket, log *slog.Logger) *Overrides {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Overrides{b: b, log: log, cache: map[string]Limits{}, ready: make(chan struct{}), done: make(chan struct{})}
}

// Start loads every override and keeps following changes until Stop. It
// returns once the initial values are loaded (or ctx ends).
func (o *Overrides) Start(ctx context.Context) error {
	wctx, cancel := context.WithCancel(context.Background())
	o.stop = cancel
	w, err := o.b.KV().WatchAll(wctx, jetstream.IncludeHistory())
	if err != nil {
		cancel()
		close(o.done)
		return fmt.Errorf("edge: watch overrides: %w", kvstore.MapError(err))
	}
	go o.follow(wctx, w)
	select {
	case <-o.ready:
		return nil
	case <-ctx.Done():
		o.Stop()
		return ctx.Err()
	}
}

func (o *Overrides) follow(ctx context.Context, w jetstream.KeyWatcher) {
	defer close(o.done)
	defer func() { _ = w.Stop() }()
	readyOnce := sync.Once{}
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil { // end of the initial values
				readyOnce.Do(func() { close(o.ready) })
				continue
			}
			tenant, err := kvstore.DecodeToken(e.Key())
			if err != nil {
				continue
			}
			o.mu.Lock()
			if e.Operation() != jetstream.KeyValuePut {
				delete(o.cache, tenant)
			} else {
				var l Limits
				if err := json.Unmarshal(e.Value(), &l); err == nil {
					o.cache[tenant] = l
				} else {
					o.log.Warn("ignoring malformed limit override", "error", err)
				}
			}
			o.mu.Unlock()
		}
	}
}

// Stop ends the watcher and waits for it.
func (o *Overrides) Stop() {
	o.closer.Do(func() {
		if o.stop != nil {
			o.stop()
		}
	})
	<-o.done
}

// Get returns the cached override of tenant.
func (o *Overrides) Get(tenant string) (Limits, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	l, ok := o.cache[tenant]
	return l, ok
}

// Set stores an override fleet-wide and updates the local cache at once.
func (o *Overrides) Set(ctx context.Context, tenant string, l Limits) error {
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := o.b.Put(ctx, kvstore.EncodeToken(tenant), data, 0); err != nil {
		return err
	}
	o.mu.Lock()
	o.cache[tenant] = l
	o.mu.Unlock()
	return nil
}

// Delete removes an override; it reports whether there was one.
func (o *Overrides) Delete(ctx context.Context, tenant string) (bool, error) {
	key := kvstore.EncodeToken(tenant)
	if _, err := o.b.Get(ctx, key); err != nil {
		if errors.Is(err, kvstore.ErrNotFound) {
			o.mu.Lock()
			delete(o.cache, tenant)
			o.mu.Unlock()
			return false, nil
		}
		return false, err
	}
	if err := o.b.Purge(ctx, key, 0); err != nil {
		return false, err
	}
	o.mu.Lock()
	delete(o.cache, tenant)
	o.mu.Unlock()
	return true, nil
}
