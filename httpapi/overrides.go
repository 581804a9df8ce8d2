package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Overrides holds the fleet-wide per-tenant limit overrides set through the
// admin API: kept in a KV bucket, cached in memory by a KV watcher, so the
// request path never waits on KV for them.
type Overrides struct {
	b   *kvstore.Bucket
	log *slog.Logger

	mu    sync.RWMutex
	cache map[string]Limits

	f *kvstore.Follower
}

// NewOverrides returns an Overrides on bucket b. Call Start to load and
// follow the bucket.
func NewOverrides(b *kvstore.Bucket, log *slog.Logger) *Overrides {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Overrides{b: b, log: log, cache: map[string]Limits{}}
}

// Start loads every override and keeps following changes until Stop. It
// returns once the initial values are loaded (or ctx ends).
func (o *Overrides) Start(ctx context.Context) error {
	f, err := kvstore.Follow(ctx, o.b.KV(), o.apply, nil)
	if err != nil {
		return fmt.Errorf("httpapi: overrides: %w", err)
	}
	o.f = f
	return nil
}

func (o *Overrides) apply(e jetstream.KeyValueEntry, _ bool) {
	tenant, err := protocol.DecodeToken(e.Key())
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(o.cache, tenant)
		return
	}
	var l Limits
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		o.log.Warn("ignoring malformed limit override", "error", err)
		return
	}
	o.cache[tenant] = l
}

// Stop ends the watcher and waits for it.
func (o *Overrides) Stop() {
	if o.f != nil {
		o.f.Stop()
	}
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
	if _, err := o.b.Put(ctx, protocol.EncodeToken(tenant), data, 0); err != nil {
		return err
	}
	o.mu.Lock()
	o.cache[tenant] = l
	o.mu.Unlock()
	return nil
}

// Delete removes an override; it reports whether there was one.
func (o *Overrides) Delete(ctx context.Context, tenant string) (bool, error) {
	key := protocol.EncodeToken(tenant)
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
