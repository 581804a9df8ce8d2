package claims

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/internal/retry"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// KV is the fleet-wide Store: dedupe claims in a JetStream KV bucket opened
// with kvstore.OpenBucket (History 1, LimitMarkerTTL set), under KVKey(id)
// with a per-message TTL. Claim is one create-if-absent write (plus a read
// when the key is taken); Settle and Release are a read and a
// revision-checked write; SettleOwn is the write alone. KV holds no mutable
// state, so calls do not serialize: one goroutine per call pipelines them.
type KV struct {
	b   *kvstore.Bucket
	now func() time.Time
	log *slog.Logger
}

var _ Store = (*KV)(nil)

// BucketConfig is the configuration of the dedupe claims bucket named
// name (kvstore.BucketNames(prefix).Claims) with replicas copies (0: 1; a
// negative count is refused when the bucket is opened). Without
// WithExpiryEvents an expired claim vanishes at once and nothing is
// written for it.
func BucketConfig(name string, replicas int, opts ...BucketOption) kvstore.BucketConfig {
	c := kvstore.BucketConfig{
		Name:           name,
		Description:    "sluice dedupe claims",
		Replicas:       replicas,
		LimitMarkerTTL: time.Second,
		NoMarkers:      true,
	}
	for _, o := range opts {
		if o != nil {
			o.applyBucket(&c)
		}
	}
	return c
}

// NewKV returns a Store on b, a bucket opened with kvstore.OpenBucket
// (History 1, per-key TTLs), e.g. with BucketConfig. Errors:
// protocol.ErrInvalidOption.
func NewKV(b *kvstore.Bucket, opts ...KVOption) (*KV, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil bucket", errInvalidOption)
	}
	o, err := newOptions(opts, KVOption.applyKV)
	if err != nil {
		return nil, err
	}
	return &KV{b: b, now: o.now, log: o.log.With("bucket", b.Name())}, nil
}

// maxClaimAttempts bounds how often Claim retries when the holder's entry
// vanishes between the failed create and the read (a claim expiring). The
// retries back off from claimBackoffMin, doubling: at a key's expiry the
// store can keep changing for longer than a few round trips, and retries
// without a pause answered 503 there.
const maxClaimAttempts = 6

const (
	claimBackoffMin = time.Millisecond
	claimBackoffMax = 16 * time.Millisecond
)

// Claim takes id for hookID as a pending claim that expires after
// pendingTTL (rounded up to whole seconds, at least 1 s, at most MaxTTL).
// A taken key is a result: Duplicate with the original hook id, or Pending
// with the holder's and RetryAfter (>= 1 ms). A claim already pending for
// hookID is OK with its revision (an idempotent retry). When the holder's
// claim vanishes meanwhile, Claim tries again, a bounded number of times.
// protocol.ErrUnavailable also covers a record this package cannot read.
func (s *KV) Claim(ctx context.Context, id ID, hookID string, pendingTTL time.Duration) (Result, error) {
	ttl, err := claimArgs(id, hookID, pendingTTL)
	if err != nil {
		return Result{}, err
	}
	key := KVKey(id)
	val := encodeValue(valuePending, hookID)
	wait := claimBackoffMin
	for attempt := 0; attempt < maxClaimAttempts; attempt++ {
		if attempt > 0 {
			if err := retry.Sleep(ctx, wait); err != nil {
				return Result{}, storeErr("claim", key, err)
			}
			wait = min(2*wait, claimBackoffMax)
		}
		rev, rec, err := s.b.Create(ctx, key, val, ttl)
		if err == nil {
			return Result{Outcome: OK, Revision: rev, HookID: hookID}, nil
		}
		if !errors.Is(err, kvstore.ErrExists) {
			return Result{}, storeErr("claim", key, err)
		}
		if rec == nil { // the holder's entry vanished under us: try again
			s.log.Debug("claim contended", "key", key, "attempt", attempt)
			continue
		}
		v, ok := decodeValue(rec.Value)
		if !ok {
			return Result{}, s.unreadable(key, rec)
		}
		if v.S == valueCommitted {
			return Result{Outcome: Duplicate, Revision: rec.Revision, HookID: v.H}, nil
		}
		if v.H == hookID { // our own claim: a retried call
			return Result{Outcome: OK, Revision: rec.Revision, HookID: hookID}, nil
		}
		exp := rec.ExpiresAt()
		if exp.IsZero() { // written without a TTL (not by us): assume ours
			exp = rec.Created.Add(ttl)
		}
		return Result{Outcome: Pending, Revision: rec.Revision, HookID: v.H, RetryAfter: retryAfter(exp, s.now())}, nil
	}
	return Result{}, fmt.Errorf("%w: claim %s: still contended after %d attempts", errUnavailable, key, maxClaimAttempts)
}

// Settle commits the pending claim at rev held by hookID with a
// revision-checked write carrying ttl (rounded like Claim's).
// protocol.ErrClaimLost: no claim, a stale rev, another hook id, or already
// committed.
func (s *KV) Settle(ctx context.Context, id ID, hookID string, rev uint64, ttl time.Duration) error {
	key, ttl, err := settleArgs(id, hookID, rev, ttl)
	if err != nil {
		return err
	}
	if err := s.check(ctx, "settle", key, hookID, rev, true); err != nil {
		return err
	}
	if _, err := s.b.Update(ctx, key, encodeValue(valueCommitted, hookID), rev, ttl); err != nil {
		if errors.Is(err, kvstore.ErrWrongLastSequence) {
			return fmt.Errorf("%w: settle %s: revision %d changed under us", protocol.ErrClaimLost, key, rev)
		}
		return storeErr("settle", key, err)
	}
	return nil
}

// SettleOwn is Settle in one write, for a caller whose rev comes from its
// own OK Claim of hookID, keeping digest in the committed record. Only when
// the server refuses the write is the key read, to tell a lost claim from a
// retried settle that landed; both are protocol.ErrClaimLost.
func (s *KV) SettleOwn(ctx context.Context, id ID, hookID, digest string, rev uint64, ttl time.Duration) error {
	key, ttl, err := settleArgs(id, hookID, rev, ttl)
	if err != nil {
		return err
	}
	if err := ValidateDigest(digest); err != nil {
		return err
	}
	_, err = s.b.Update(ctx, key, claimValue{S: valueCommitted, H: hookID, D: digest}.encode(), rev, ttl)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, kvstore.ErrWrongLastSequence):
		return storeErr("settle", key, err)
	}
	// Refused: the claim at rev is gone. Say why, if a read can tell.
	rec, rerr := s.b.GetLeader(ctx, key)
	if rerr == nil && rec.Revision > rev {
		if v, ok := decodeValue(rec.Value); ok && v.S == valueCommitted && v.H == hookID {
			return fmt.Errorf("%w: settle %s: already settled at revision %d (a retry)", protocol.ErrClaimLost, key, rec.Revision)
		}
	}
	return fmt.Errorf("%w: settle %s: revision %d is no longer the pending claim of this hook id", protocol.ErrClaimLost, key, rev)
}

// Release drops the claim at rev held by hookID, pending or committed, so
// the key can be claimed again at once (a purge marker, gone after the
// bucket's LimitMarkerTTL). protocol.ErrClaimLost: no claim, a stale rev,
// or another hook id.
func (s *KV) Release(ctx context.Context, id ID, hookID string, rev uint64) error {
	if err := validateSettle(id, hookID, rev); err != nil {
		return err
	}
	key := KVKey(id)
	if err := s.check(ctx, "release", key, hookID, rev, false); err != nil {
		return err
	}
	if err := s.b.Purge(ctx, key, rev); err != nil {
		if errors.Is(err, kvstore.ErrWrongLastSequence) {
			return fmt.Errorf("%w: release %s: revision %d changed under us", protocol.ErrClaimLost, key, rev)
		}
		return storeErr("release", key, err)
	}
	return nil
}

// check reads key and returns protocol.ErrClaimLost unless its live record is at rev,
// held by hookID and (when pendingOnly) still pending. The revision-checked
// write that follows makes the decision final.
func (s *KV) check(ctx context.Context, op, key, hookID string, rev uint64, pendingOnly bool) error {
	rec, err := s.b.Get(ctx, key)
	if errors.Is(err, kvstore.ErrNotFound) || (err == nil && rec.Revision < rev) {
		// A direct get may be answered by a replica that has not applied
		// the write the caller was told about (R3): ask the leader. (A
		// replica lags, it is never ahead: a newer revision is final.)
		rec, err = s.b.GetLeader(ctx, key)
	}
	switch {
	case errors.Is(err, kvstore.ErrNotFound):
		return fmt.Errorf("%w: %s %s: no claim", protocol.ErrClaimLost, op, key)
	case err != nil:
		return storeErr(op, key, err)
	case rec.Revision != rev:
		return fmt.Errorf("%w: %s %s: revision %d, claim is at %d", protocol.ErrClaimLost, op, key, rev, rec.Revision)
	}
	v, ok := decodeValue(rec.Value)
	switch {
	case !ok:
		return s.unreadable(key, rec)
	case v.H != hookID:
		return fmt.Errorf("%w: %s %s: held by another hook id", protocol.ErrClaimLost, op, key)
	case pendingOnly && v.S != valuePending:
		return fmt.Errorf("%w: %s %s: already committed", protocol.ErrClaimLost, op, key)
	}
	return nil
}

// Get reads the claim on id: StatePending or StateCommitted with hook id,
// revision and ExpiresIn (never negative), or StateAbsent. On a replicated
// bucket a replica a write or two behind may answer.
func (s *KV) Get(ctx context.Context, id ID) (State, error) {
	if err := id.Validate(); err != nil {
		return State{}, err
	}
	key := KVKey(id)
	rec, err := s.b.Get(ctx, key)
	if errors.Is(err, kvstore.ErrNotFound) {
		return State{State: protocol.StateAbsent}, nil
	}
	if err != nil {
		return State{}, storeErr("get", key, err)
	}
	v, ok := decodeValue(rec.Value)
	if !ok {
		return State{}, s.unreadable(key, rec)
	}
	return State{State: v.stateName(), HookID: v.H, Revision: rec.Revision, ExpiresIn: expiresIn(rec.ExpiresAt(), s.now()), Digest: v.D}, nil
}

func (s *KV) unreadable(key string, rec *kvstore.Record) error {
	s.log.Warn("unreadable claim record", "key", key, "revision", rec.Revision, "bytes", len(rec.Value))
	return fmt.Errorf("%w: %s at revision %d is not a claim record", errUnavailable, key, rec.Revision)
}

// storeErr wraps a bucket failure in protocol.ErrUnavailable: the store could not
// give an answer (timeout, no responders, closed connection or an
// unexpected server error).
func storeErr(op, key string, err error) error {
	return fmt.Errorf("%w: %s %s: %w", errUnavailable, op, key, err)
}

func validateClaim(id ID, hookID string) error {
	if err := id.Validate(); err != nil {
		return err
	}
	return protocol.ValidateHookID(hookID)
}

// claimArgs validates Claim's arguments (every store's) and returns the
// TTL to write.
func claimArgs(id ID, hookID string, ttl time.Duration) (time.Duration, error) {
	if err := validateClaim(id, hookID); err != nil {
		return 0, err
	}
	return normTTL(ttl)
}

// settleArgs validates Settle's arguments and returns the key and the
// TTL to write.
func settleArgs(id ID, hookID string, rev uint64, ttl time.Duration) (string, time.Duration, error) {
	if err := validateSettle(id, hookID, rev); err != nil {
		return "", 0, err
	}
	ttl, err := normTTL(ttl)
	if err != nil {
		return "", 0, err
	}
	return KVKey(id), ttl, nil
}

func validateSettle(id ID, hookID string, rev uint64) error {
	if err := validateClaim(id, hookID); err != nil {
		return err
	}
	if rev == 0 {
		return fmt.Errorf("%w: revision must not be 0", protocol.ErrInvalid)
	}
	return nil
}

// StartSettleOwn starts SettleOwn as one async revision-checked write
// (kvstore.Bucket.UpdateStart, the same record SettleOwn writes); a refused
// write is SettleOwn's to decide (see StartedSettle).
func (s *KV) StartSettleOwn(id ID, hookID string, rev uint64, ttl time.Duration) (StartedSettle, error) {
	key, ttl, err := settleArgs(id, hookID, rev, ttl)
	if err != nil {
		return nil, err
	}
	c, err := s.b.UpdateStart(key, claimValue{S: valueCommitted, H: hookID}.encode(), rev, ttl)
	if err != nil {
		return nil, storeErr("settle", key, err)
	}
	return startedSettle{c: c, key: key}, nil
}

type startedSettle struct {
	c   kvstore.AsyncCreate
	key string
}

func (c startedSettle) Wait(ctx context.Context) (bool, error) {
	_, err := c.c.Wait(ctx)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, kvstore.ErrWrongLastSequence), errors.Is(err, kvstore.ErrNoStream):
		return false, nil // for SettleOwn: it sends again, or says why it is lost
	default:
		return true, storeErr("settle", c.key, err)
	}
}

// StartClaim starts Claim as one async create (kvstore.Bucket.CreateStart),
// for callers that pipeline claim writes: Wait gives the OK result when the
// create lands; anything else (a taken key, a marker, a failure to start) is
// for Claim, which reads the holder or retries.
func (s *KV) StartClaim(id ID, hookID string, pendingTTL time.Duration) (StartedClaim, error) {
	ttl, err := claimArgs(id, hookID, pendingTTL)
	if err != nil {
		return nil, err
	}
	c, err := s.b.CreateStart(KVKey(id), encodeValue(valuePending, hookID), ttl)
	if err != nil {
		return nil, storeErr("claim", KVKey(id), err)
	}
	return startedKV{c: c, hookID: hookID}, nil
}

type startedKV struct {
	c      kvstore.AsyncCreate
	hookID string
}

func (c startedKV) Wait(ctx context.Context) (Result, bool, error) {
	rev, err := c.c.Wait(ctx)
	switch {
	case err == nil:
		return Result{Outcome: OK, Revision: rev, HookID: c.hookID}, true, nil
	case errors.Is(err, kvstore.ErrWrongLastSequence), errors.Is(err, kvstore.ErrNoStream):
		return Result{}, false, nil // for Claim: it reads the holder, or retries
	default:
		return Result{}, true, storeErr("claim", "", err)
	}
}
