// Package cooldown shares upstream quota readings and penalties across a
// fleet: one instance reads "70 % of the token budget left, resets at T" or
// is refused "until T", and every instance using the same account sees it.
// Semantics: PROTOCOL.md, cooldown.*. State lives in a JetStream KV bucket
// with per-key TTLs, under protocol.Join(account, backend) (so no account
// reaches another's keys); every write also lands in a node-local store
// that answers when the bucket cannot within the call's budget.
package cooldown

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/internal/retry"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Errors returned by this package. Every error wraps at most one of them
// or protocol.ErrInvalid (malformed arguments, naming the field: the
// caller's fault, answer 400, never retry).
var (
	// protocol.ErrUnavailable is returned by Record and Penalize when the shared store
	// did not take the write within the call's budget (the write still
	// landed node-locally). Load never returns it: it answers from
	// node-local state instead.
	errUnavailable = fmt.Errorf("cooldown: store %w", protocol.ErrUnavailable)
)

// Defaults of a Store.
const (
	// DefaultReadingTTL is how long a reading is kept.
	DefaultReadingTTL = 15 * time.Minute
	// DefaultMaxLocalEntries bounds the node-local store.
	DefaultMaxLocalEntries = 10000
)

// casAttempts bounds the read-modify-write retries of one write; the budget
// bounds them in time as well.
const casAttempts = 64

// loadParallel bounds the concurrent reads of one Load.
const loadParallel = 8

// lockStripes is the number of node-local write locks keys hash onto.
const lockStripes = 256

// protocol.ErrInvalidOption is wrapped by the error of New for an option with an
// invalid argument.
var errInvalidOption = fmt.Errorf("cooldown: %w", protocol.ErrInvalidOption)

// Option configures New. An option with an invalid argument (a
// non-positive duration or count, a nil clock) makes New fail with an error
// wrapping protocol.ErrInvalidOption.
type Option interface{ applyStore(*Store) error }

type storeOption func(*Store) error

func (o storeOption) applyStore(s *Store) error { return o(s) }

// WithReadingTTL sets how long a reading is kept (default 15 min; rounded up
// to whole seconds by the store).
func WithReadingTTL(d time.Duration) Option {
	return storeOption(option.Positive(errInvalidOption, "reading TTL", d, func(s *Store, d time.Duration) { s.readingTTL = kvstore.RoundTTL(d) }))
}

// WithBudget bounds one call to the shared store (default
// protocol.DefaultTimeout): a Load that gets no answer within it answers
// from node-local state, a write fails with protocol.ErrUnavailable. A caller's
// earlier deadline wins; a later one does not extend the budget.
func WithBudget(d time.Duration) Option {
	return storeOption(option.Positive(errInvalidOption, "budget", d, func(s *Store, d time.Duration) { s.budget = d }))
}

// WithClock replaces time.Now (for tests). The clock decides reading expiry,
// whether a penalty has passed, and key TTLs.
func WithClock(now func() time.Time) Option {
	return storeOption(option.Clock(now, errInvalidOption, func(s *Store) *func() time.Time { return &s.now }))
}

// WithLogger sets the logger (default, or nil: discard). Fallbacks to
// node-local state are logged at warn level.
func WithLogger(l *slog.Logger) Option {
	return storeOption(func(s *Store) error {
		if l != nil {
			s.log = l.With("component", "cooldown")
		}
		return nil
	})
}

// WithMaxLocalEntries bounds the node-local store (default 10000
// (account, backend) pairs); beyond it the least recently used is evicted.
func WithMaxLocalEntries(n int) Option {
	return storeOption(option.Positive(errInvalidOption, "max local entries", n, func(s *Store, n int) { s.maxLocal = n }))
}

// Store shares readings and penalties through a KV bucket, with a
// node-local fallback. It is safe for concurrent use; it runs no background
// goroutines (Load reads backends in parallel and waits for them). One key
// per (account, backend), every write a revision-checked read-modify-write;
// the merge with node-local state: docs/DESIGN.md "Cooldown store".
type Store struct {
	b          *kvstore.Bucket
	readingTTL time.Duration
	budget     time.Duration
	now        func() time.Time
	log        *slog.Logger
	maxLocal   int
	local      *localStore
	locks      [lockStripes]chan struct{}
}

// New returns a Store over bucket b (typically opened with
// BucketConfig). A nil b gives a node-local-only store: every shared call
// is protocol.ErrUnavailable. Errors: protocol.ErrInvalidOption.
func New(b *kvstore.Bucket, opts ...Option) (*Store, error) {
	s := &Store{
		b:          b,
		readingTTL: DefaultReadingTTL,
		budget:     protocol.DefaultTimeout,
		now:        time.Now,
		log:        slog.New(slog.DiscardHandler),
		maxLocal:   DefaultMaxLocalEntries,
	}
	if err := option.Apply(s, opts, Option.applyStore); err != nil {
		return nil, err
	}
	s.local = newLocalStore(s.maxLocal)
	for i := range s.locks {
		s.locks[i] = make(chan struct{}, 1)
	}
	return s, nil
}

// BucketConfig is the KV bucket the cooldown store of a fleet with subject
// prefix prefix uses (kvstore.BucketNames(prefix).Cooldown), with replicas
// copies (1 embedded, 3 in a cluster).
func BucketConfig(prefix string, replicas int) kvstore.BucketConfig {
	return kvstore.BucketConfig{
		Name:        kvstore.BucketNames(prefix).Cooldown,
		Description: "sluice: shared upstream readings and penalties",
		Replicas:    replicas,
	}
}

// Key is the KV key of (account, backend): protocol.Join(account, backend).
// Distinct pairs always give distinct keys.
func Key(account, backend string) string { return protocol.Join(account, backend) }

// Record stores reading r for (r.Account, r.Backend), kept for the reading
// TTL, and atomically drops a penalty whose instant r.ObservedAtMs has
// reached. The newer of the stored and the new reading is kept (the new one
// on a tie); an older one still clears a penalty it has reached. A write
// the shared store does not take within the budget wraps protocol.ErrUnavailable;
// either way the reading is kept node-locally.
func (s *Store) Record(ctx context.Context, r protocol.Reading) error {
	if err := r.Validate(); err != nil {
		return err
	}
	nowMs := s.now().UnixMilli()
	rd := &reading{
		ObservedAtMs: r.ObservedAtMs,
		Snapshots:    append([]protocol.Snapshot(nil), r.Snapshots...),
		ExpiresAtMs:  nowMs + s.readingTTL.Milliseconds(),
	}
	return s.write(ctx, "record", r.Account, r.Backend, nowMs,
		func(key string) { s.local.record(key, rd, nowMs) },
		func(st *state) { st.applyReading(rd) })
}

// Penalize sets the penalty of (account, backend): the upstream refuses us
// until untilMs (Unix ms), replacing any earlier penalty; nil or a past
// instant clears it. Errors and the node-local copy are as for Record.
func (s *Store) Penalize(ctx context.Context, account, backend string, untilMs *int64) error {
	req := protocol.PenalizeRequest{Account: account, Backend: backend, UntilMs: untilMs}
	if err := req.Validate(); err != nil {
		return err
	}
	nowMs := s.now().UnixMilli()
	var until *int64
	if untilMs != nil && *untilMs > nowMs {
		until = ptr(*untilMs)
	}
	err := s.write(ctx, "penalize", account, backend, nowMs,
		func(key string) { s.local.penalize(key, until, nowMs) },
		func(st *state) { st.PenaltyUntilMs = until })
	if err != nil && until != nil {
		// Written later, when the shared store answers again.
		s.local.markPending(Key(account, backend), nowMs)
	}
	return err
}

// maxFlush bounds the pending penalties one successful call writes.
const maxFlush = 8

// flushPending writes penalties whose shared write failed now that the
// shared store answered, at most maxFlush per call, within ctx, by the Load
// merge rule (so a penalty is never written over the reading that ended
// it). It stops at the first failure: the rest wait for the next call.
func (s *Store) flushPending(ctx context.Context) {
	if !s.local.hasPending() {
		return
	}
	nowMs := s.now().UnixMilli()
	for key, until := range s.local.pendingPenalties(nowMs, maxFlush) {
		unlock, err := s.lockKey(ctx, key)
		if err != nil {
			return
		}
		st, err := s.update(ctx, key, nowMs, func(st *state) {
			if st.Reading != nil && st.Reading.ObservedAtMs >= until {
				return
			}
			st.PenaltyUntilMs = later(st.PenaltyUntilMs, ptr(until))
		})
		unlock()
		if err != nil {
			s.log.Debug("pending penalty still not written", "key", key, "error", err)
			return
		}
		s.local.observe(key, st, nowMs)
		s.local.written(key, until)
		s.log.Info("penalty written to the shared store after a failed write", "key", key, "until_ms", until)
	}
}

// write applies one change of (account, backend): local is the node-local
// write, mutate the change of the shared state. Within the budget it takes
// the node's lock of the key (so writers of one node queue instead of
// racing each other's CAS), writes locally, then updates the shared state.
// The local write lands even when the lock or the shared write does not.
func (s *Store) write(ctx context.Context, op, account, backend string, nowMs int64, local func(key string), mutate func(*state)) error {
	key := Key(account, backend)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	unlock, err := s.lockKey(ctx, key)
	local(key)
	if err != nil {
		return s.writeFailed(op, account, backend, fmt.Errorf("kvstore: store %w: waiting for a local writer: %w", protocol.ErrUnavailable, err))
	}
	st, err := s.update(ctx, key, nowMs, mutate)
	unlock()
	if err != nil {
		return s.writeFailed(op, account, backend, err)
	}
	s.local.observe(key, st, nowMs)
	s.flushPending(ctx)
	return nil
}

// lockKey takes the node-local write lock of key's stripe, or gives up when
// ctx ends.
func (s *Store) lockKey(ctx context.Context, key string) (unlock func(), err error) {
	h := uint32(2166136261) // FNV-1a 32
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	l := s.locks[h%lockStripes]
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Load returns the state of backends under account: exactly one entry per
// requested backend, in order (duplicates repeat); a backend never recorded
// nor penalized has null times and empty snapshots, and a passed penalty is
// not reported. An entry the shared store cannot answer within the budget
// comes from node-local state with Fallback set; Load does not fail for that.
// A store failure other than unavailability is returned wrapped.
func (s *Store) Load(ctx context.Context, account string, backends []string) ([]protocol.Entry, error) {
	req := protocol.LoadRequest{Account: account, Backends: backends}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	nowMs := s.now().UnixMilli()
	out := make([]protocol.Entry, len(backends))
	errs := make([]error, len(backends))

	ctx, cancel := s.bound(ctx)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, loadParallel)
	for i, backend := range backends {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = s.loadOne(ctx, account, backend, nowMs)
		}()
	}
	wg.Wait()

	local := 0
	if firstErr(errs) == nil {
		s.flushPending(ctx)
	}
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, protocol.ErrUnavailable):
			r, p := s.local.view(Key(account, backends[i]), nowMs)
			out[i] = entry(backends[i], r, p)
			out[i].Fallback = true
			local++
		default:
			return nil, fmt.Errorf("cooldown: load %q: %w", backends[i], err)
		}
	}
	if local > 0 {
		s.log.Warn("shared store unavailable; answered from node-local state",
			"op", "load", "account", account, "local", local, "backends", len(backends), "error", firstErr(errs))
	}
	return out, nil
}

// loadOne reads one backend from the shared store and merges it into the
// node-local state. An error leaves the entry to the caller.
func (s *Store) loadOne(ctx context.Context, account, backend string, nowMs int64) (protocol.Entry, error) {
	key := Key(account, backend)
	st, _, err := s.read(ctx, key)
	if err != nil {
		return protocol.Entry{}, err
	}
	st.prune(nowMs)
	r, p := s.local.observe(key, st, nowMs)
	return entry(backend, r, p), nil
}

// read gets the state under key and its revision (0: no live value). A
// value that does not decode is logged and read as empty, so the next write
// replaces it.
func (s *Store) read(ctx context.Context, key string) (state, uint64, error) {
	if s.b == nil {
		return state{}, 0, fmt.Errorf("kvstore: store %w: no shared bucket", protocol.ErrUnavailable)
	}
	rec, err := s.b.Get(ctx, key)
	switch {
	case errors.Is(err, kvstore.ErrNotFound):
		return state{}, 0, nil
	case err != nil:
		return state{}, 0, err
	}
	var st state
	if err := json.Unmarshal(rec.Value, &st); err != nil {
		s.log.Warn("undecodable value; treating it as empty", "key", key, "revision", rec.Revision, "error", err)
		st = state{}
	}
	return st, rec.Revision, nil
}

// update is the revision-checked read-modify-write of key (see Store,
// Atomicity): read, prune, mutate, then write with the revision read — or
// create when absent, or purge when nothing is live any more — retrying on
// a lost race. It returns the state written.
func (s *Store) update(ctx context.Context, key string, nowMs int64, mutate func(*state)) (state, error) {
	var lastErr error
	for attempt := 0; attempt < casAttempts; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return state{}, fmt.Errorf("kvstore: store %w: %w (after %v)", protocol.ErrUnavailable, err, lastErr)
			}
		}
		st, rev, err := s.read(ctx, key)
		if err != nil {
			return state{}, err
		}
		st.prune(nowMs)
		mutate(&st)
		switch {
		case st.empty() && rev == 0:
			return st, nil
		case st.empty():
			err = s.b.Purge(ctx, key, rev)
		default:
			var v []byte
			v, err = json.Marshal(st)
			if err != nil {
				return state{}, fmt.Errorf("cooldown: encode: %w", err)
			}
			ttl := keyTTL(st.expiresAtMs(), nowMs)
			if rev == 0 {
				_, _, err = s.b.Create(ctx, key, v, ttl)
			} else {
				_, err = s.b.Update(ctx, key, v, rev, ttl)
			}
		}
		if err == nil {
			return st, nil
		}
		if !errors.Is(err, kvstore.ErrWrongLastSequence) && !errors.Is(err, kvstore.ErrExists) {
			return state{}, err
		}
		lastErr = err
	}
	return state{}, fmt.Errorf("kvstore: store %w: %d attempts contended: %w", protocol.ErrUnavailable, casAttempts, lastErr)
}

// bound limits one call to the budget; an earlier deadline of the caller's
// stays in force.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.budget)
}

// backoff waits a short random while before CAS retry attempt (growing with
// the attempt, at most ~4 ms), or until ctx ends: random, unlike
// internal/retry, so racing writers of one key do not retry in step.
func backoff(ctx context.Context, attempt int) error {
	spread := time.Duration(min(attempt, 8)) * 500 * time.Microsecond
	return retry.Sleep(ctx, rand.N(spread)+50*time.Microsecond)
}

// writeFailed maps a failed shared write: store unavailability (and
// contention beyond the bound) becomes protocol.ErrUnavailable; the local write stands.
func (s *Store) writeFailed(op, account, backend string, err error) error {
	s.log.Warn("shared write failed; kept node-locally", "op", op, "account", account, "backend", backend, "error", err)
	if errors.Is(err, protocol.ErrUnavailable) {
		return fmt.Errorf("%w: %s: %w", errUnavailable, op, err)
	}
	return fmt.Errorf("cooldown: %s: %w", op, err)
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
