// Package claims implements sluice's two-phase dedupe claims and replay-nonce
// claims, on a JetStream KV bucket (fleet-wide) and in memory (the node-local
// fallback), both passing one conformance suite. A dedupe claim goes pending
// when a node starts on some work and is committed (settled) once the work is
// durable: a second claimer is told to retry later, then that it is a
// duplicate (with the original hook id). A dead holder's claim expires after
// its pending TTL.
package claims

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/names"
	"github.com/sluice-dev/sluice/protocol"
)

// Errors returned by Store and ReplayStore methods, besides two of
// protocol: protocol.ErrClaimLost from Settle and Release when the claim is
// no longer the caller's (a stale revision: it expired, was released,
// settled or taken; another hook id; for Settle, already committed), and
// protocol.ErrInvalid for malformed arguments (the caller's fault: 400,
// never retry).
var (
	// protocol.ErrUnavailable is returned when the backing store did not answer in
	// time, or could not give an answer at all (connection closed, an
	// unexpected server error, a record it did not write, an in-memory
	// store full of pending claims, a ctx already done). Callers fall back
	// or answer 503.
	errUnavailable = fmt.Errorf("claims: store %w", protocol.ErrUnavailable)
)

// MaxKeyBytes is the longest dedupe key stored as is; longer keys are stored
// as "sha256:<lowercase hex>" of the key.
const MaxKeyBytes = names.MaxKey

// NormalizeKey returns the stored form of a dedupe key: the key itself, or
// "sha256:<hex>" when it is longer than MaxKeyBytes.
func NormalizeKey(key string) string { return names.NormalizeKey(key) }

// ID names one dedupe claim. Key is the raw dedupe key; implementations
// normalize it with NormalizeKey.
type ID struct {
	Tenant string
	Source string
	Key    string
}

// Validate checks the parts of an ID (protocol.ValidateClaimID).
func (id ID) Validate() error { return protocol.ValidateClaimID(id.Tenant, id.Source, id.Key) }

// Outcome of a Claim.
type Outcome int

const (
	// OK: the claim is now pending for the caller's hook id.
	OK Outcome = iota + 1
	// Duplicate: the key is committed; Result.HookID is the original hook id.
	Duplicate
	// Pending: another holder's claim is in flight; retry after RetryAfter.
	Pending
)

// String is the outcome's wire name: "ok", "duplicate" or "pending".
func (o Outcome) String() string {
	if names := [...]string{"ok", "duplicate", "pending"}; o >= 1 && int(o) <= len(names) {
		return names[o-1]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result of a Claim. Results that are not failures are values, not errors.
type Result struct {
	Outcome Outcome
	// Revision identifies the pending claim (OK); Settle and Release must
	// present it. For Duplicate/Pending it is the revision of the holder's
	// entry.
	Revision uint64
	// HookID is the caller's id (OK), the original (Duplicate) or the
	// in-flight holder's (Pending).
	HookID string
	// RetryAfter (Pending only): how long until the pending claim expires,
	// at least 1 ms.
	RetryAfter time.Duration
}

// State of a claim as read by Get. An absent claim has only State set.
type State struct {
	State     string        // StatePending, StateCommitted or StateAbsent
	HookID    string        // the holder's hook id
	Revision  uint64        // what Settle/Release must present
	ExpiresIn time.Duration // time left until the claim expires, >= 0
	// Digest is what SettleOwn kept of the committed claim's request
	// ("" for a claim settled without one).
	Digest string
}

// Store is a two-phase dedupe claim store, safe for concurrent use. Every
// method returns protocol.ErrInvalid for malformed arguments (see
// ID.Validate, ValidateHookID; a negative TTL; revision 0) and
// protocol.ErrUnavailable when the store cannot answer (a done ctx included). Every
// method is required, so a wrapper cannot lose a capability by forgetting
// one; a store that cannot pipeline answers StartClaim and StartSettleOwn
// with NotStartedClaim and NotStartedSettle.
type Store interface {
	// Claim takes the key for hookID as a pending claim that expires after
	// pendingTTL (rounded up to whole seconds, at least 1 s) unless settled.
	// A taken key is a Result (Duplicate or Pending), not an error. A claim
	// already pending for hookID itself is OK with its revision, so a
	// retried call is idempotent (hook ids are unique per piece of work).
	Claim(ctx context.Context, id ID, hookID string, pendingTTL time.Duration) (Result, error)
	// StartClaim starts Claim's create-if-absent for id without waiting
	// (pipelined claim writes: an owner starts the claims of a frame, then
	// collects them). An error (protocol.ErrInvalid, protocol.ErrUnavailable) means nothing
	// was started: call Claim.
	StartClaim(id ID, hookID string, pendingTTL time.Duration) (StartedClaim, error)
	// Settle commits the pending claim at rev for hookID; the committed claim
	// expires after ttl. It reads the holder before it writes: a network
	// client may present a revision it was told about another holder (a
	// Pending result carries it), which a blind write would commit under the
	// wrong hook id.
	Settle(ctx context.Context, id ID, hookID string, rev uint64, ttl time.Duration) error
	// SettleOwn is Settle for a caller whose rev is of an OK Result of its
	// own Claim for hookID. It skips Settle's read: the key's revision can
	// only be rev while that pending claim is there. digest (ValidateDigest;
	// "" for none) is kept in the committed record (State.Digest): what an
	// Idempotency-Key's claim keeps of its first request, to tell a retry
	// from another request reusing the key. The key is read only when the
	// write is refused, to say why.
	SettleOwn(ctx context.Context, id ID, hookID, digest string, rev uint64, ttl time.Duration) error
	// StartSettleOwn starts SettleOwn's write (no digest) without waiting,
	// as StartClaim does. An error means nothing was started: call SettleOwn.
	StartSettleOwn(id ID, hookID string, rev uint64, ttl time.Duration) (StartedSettle, error)
	// Release drops the pending (or committed) claim at rev for hookID so the
	// key can be claimed again at once. protocol.ErrClaimLost when rev is stale or hookID
	// differs.
	Release(ctx context.Context, id ID, hookID string, rev uint64) error
	// Get reads the claim's state (StateAbsent when there is none).
	Get(ctx context.Context, id ID) (State, error)
}

// StartedClaim is a claim whose create is in flight.
type StartedClaim interface {
	// Wait waits (until ctx ends) for the create: done with the result or
	// an error (protocol.ErrUnavailable), or not done, nothing taken, when the create
	// was refused, no stream took it or nothing was sent: the caller then
	// calls Claim, which reads the holder (or retries).
	Wait(ctx context.Context) (res Result, done bool, err error)
}

// StartedSettle is a settle whose write is in flight.
type StartedSettle interface {
	// Wait waits (until ctx ends) for the write: done with nil or an error
	// (protocol.ErrUnavailable), or not done when the write was refused, no stream
	// took it or nothing was sent: the caller then calls SettleOwn, which
	// resends to a busy key or reads it to say why the claim is lost.
	Wait(ctx context.Context) (done bool, err error)
}

// NotStartedClaim and NotStartedSettle are what a store that does not
// pipeline (Memory) starts: their Wait is never done, so the caller makes
// the one call, Claim or SettleOwn.
func NotStartedClaim() StartedClaim { return notStartedClaim{} }

// NotStartedSettle: see NotStartedClaim.
func NotStartedSettle() StartedSettle { return notStartedSettle{} }

type notStartedClaim struct{}

func (notStartedClaim) Wait(context.Context) (Result, bool, error) { return Result{}, false, nil }

type notStartedSettle struct{}

func (notStartedSettle) Wait(context.Context) (bool, error) { return false, nil }

// ReplayStore holds replay-nonce claims with a capacity. Implementations are
// safe for concurrent use.
type ReplayStore interface {
	// Claim records (namespace, key) until retainUntil (Unix seconds). A
	// duplicate never refreshes retention and is AlreadyClaimed even at
	// capacity; a new pair beyond capacity is Full.
	Claim(ctx context.Context, namespace, key string, retainUntil int64) (protocol.ReplayOutcome, error)
	// Release forgets a pair this caller has just Claimed and not used (its
	// request was refused for another reason, so an identical resend must
	// not read as a replay). Releasing an absent pair is not an error.
	Release(ctx context.Context, namespace, key string) error
}
