package protocol

import "fmt"

// Charge kinds used by the edge.
const (
	KindHooks = "hooks"
	KindBytes = "bytes"
)

// Charge is one GCRA charge: Increment µs of the (Kind, Tenant) bucket whose
// capacity (burst tolerance) is Capacity µs.
type Charge struct {
	Kind        string `json:"kind"`
	Tenant      string `json:"tenant"`
	IncrementUs int64  `json:"increment_us"`
	CapacityUs  int64  `json:"capacity_us"`
}

// ClaimRequest asks the owner to take a pending dedupe claim in the same
// round trip as the charges.
type ClaimRequest struct {
	Tenant       string `json:"tenant"`
	Source       string `json:"source"`
	Key          string `json:"key"`
	HookID       string `json:"hook_id"`
	TTLMs        int64  `json:"ttl_ms,omitempty"`
	PendingTTLMs int64  `json:"pending_ttl_ms,omitempty"`
}

// SettleRequest commits the pending claim a hit took (quota.Router.Settle):
// the claims.settle of PROTOCOL.md, sent to the tenant's partition owner.
type SettleRequest struct {
	Tenant   string
	Source   string
	Key      string
	HookID   string
	Revision uint64 // the hit's reply's revision
	// TTLMs is how long the committed claim is kept (0: the owner's
	// default, the node's --dedupe-ttl).
	TTLMs int64
}

// HitRequest is the body of sluice.v1.quota.hit.
type HitRequest struct {
	Charges []Charge      `json:"charges"`
	Claim   *ClaimRequest `json:"claim"`
}

// Hit results.
const (
	ResultOK          = "ok"
	ResultDuplicate   = "duplicate"
	ResultPending     = "pending"
	ResultRateLimited = "rate_limited"
)

// LimitState reports one charge's bucket after the decision, for the HTTP
// RateLimit headers (an extension of PROTOCOL.md's reply).
type LimitState struct {
	Kind         string `json:"kind"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_ms"`
}

// HitReply is the reply of sluice.v1.quota.hit: every PROTOCOL.md key is
// always present (hook_id "" and zeros when they do not apply); "limits"
// is an extension present when the owner reports the buckets' state.
type HitReply struct {
	Result       string       `json:"result"`
	HookID       string       `json:"hook_id"`
	RetryAfterMs int64        `json:"retry_after_ms"`
	Revision     uint64       `json:"revision"`
	Limits       []LimitState `json:"limits,omitempty"`
	// Fallback is set (never on the wire) when the charges were decided
	// from node-local fallback state (the owner did not answer in time):
	// not authoritative, unlike a hit decided in process by the owner
	// (owner.Worker.HitLocal). The claim, if any, still lives in the
	// fleet's claim store.
	Fallback bool `json:"-"`
}

// Tenant is the tenant that routes the request (the claim's or the first
// charge's).
func (r *HitRequest) Tenant() string {
	if r.Claim != nil {
		return r.Claim.Tenant
	}
	if len(r.Charges) > 0 {
		return r.Charges[0].Tenant
	}
	return ""
}

// ReserveRequest is the body of sluice.v1.quota.reserve.
type ReserveRequest struct {
	Principal string `json:"principal"`
	Key       string `json:"key"`
	Max       int64  `json:"max"`
	TTLMs     int64  `json:"ttl_ms,omitempty"`
	// RequestID names the slot (optional): a reserve retried with the same
	// id gets the same grant rather than a second slot, and renews the
	// slot, which frees ttl_ms after its last reserve (its own TTL, not
	// the counter's). Release it with the same id.
	RequestID string `json:"request_id,omitempty"`
}

// ReserveReply: granted → count after the increment; denied → the count
// that blocked it.
type ReserveReply struct {
	Granted bool  `json:"granted"`
	Count   int64 `json:"count"`
}

// CounterRequest is the body of sluice.v1.quota.release and .count.
type CounterRequest struct {
	Principal string `json:"principal"`
	Key       string `json:"key"`
	// RequestID (release only, optional) releases the slot a reserve named:
	// a release retried with the same id releases nothing more.
	RequestID string `json:"request_id,omitempty"`
}

// CountReply is the reply of release and count.
type CountReply struct {
	Count int64 `json:"count"`
}

// ResetRequest is the body of sluice.v1.quota.reset.
type ResetRequest struct {
	Tenant string `json:"tenant"`
}

// OKReply is {"ok":true}: the reply of quota.reset, claims.settle,
// claims.release, cooldown.record and cooldown.penalize.
type OKReply struct {
	OK bool `json:"ok"`
}

// Bounds of a request (docs/PROTOCOL.md). Every check of a request on any
// path — the Go clients before sending, the owner on a JSON request or a
// batch frame, the sluice.v1.* service — is one of the functions of this
// package.
const (
	// MaxCharges bounds the charges of one hit.
	MaxCharges = 16
	// MaxKindBytes bounds a charge's kind (it is kept per partition).
	MaxKindBytes = 64
	// MaxNameBytes bounds tenants, sources, principals, counter keys,
	// replay namespaces and keys, cooldown accounts and backends.
	MaxNameBytes = 256
	// MaxRequestIDBytes bounds a counter request id.
	MaxRequestIDBytes = 64
	// MaxNamedSlots bounds the named slots of one counter (a reserve
	// naming a slot needs max <= it).
	MaxNamedSlots = 1024
)

// Validate checks a hit request: at least one charge or a claim; at most
// MaxCharges charges, each with a kind of 1..MaxKindBytes bytes charged
// once, a tenant of 1..MaxNameBytes bytes, and 0 < increment <= capacity;
// all charges for one tenant (the claim's, when there is one); a claim with
// tenant, source, key and hook id that the claims store accepts, and ttls
// >= 0. Errors wrap ErrInvalid.
func (r *HitRequest) Validate() error {
	if err := ValidateCharges(jsonCharges(r.Charges), r.Tenant(), r.Claim != nil); err != nil {
		return err
	}
	if c := r.Claim; c != nil {
		return ValidateClaim(c.Tenant, c.Source, c.Key, c.HookID, c.TTLMs, c.PendingTTLMs)
	}
	return nil
}

// ValidateClaim checks a hit's claim in either of its forms (decoded from
// JSON, or aliasing a batch frame: checked without allocating): tenant,
// source, key and hook id as ValidateClaimID and ValidateHookID, ttls >= 0.
func ValidateClaim[S ~string | ~[]byte](tenant, source, key, hookID S, ttlMs, pendingMs int64) error {
	if len(tenant) == 0 || len(source) == 0 || len(key) == 0 || len(hookID) == 0 {
		return fmt.Errorf("%w: claim needs tenant, source, key and hook_id", ErrInvalid)
	}
	if ttlMs < 0 || pendingMs < 0 {
		return fmt.Errorf("%w: claim ttl_ms and pending_ttl_ms must be >= 0", ErrInvalid)
	}
	// Checked before any charge is taken (claims.Store would refuse it
	// only after).
	if err := ValidateClaimID(string(tenant), string(source), string(key)); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	if err := ValidateHookID(string(hookID)); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	return nil
}

// Validate checks a settle: tenant, source, key and hook id as a hit's
// claim, a revision >= 1 and ttl_ms >= 0 (claims.settle's rules). Errors
// wrap ErrInvalid.
func (r *SettleRequest) Validate() error {
	return ValidateSettle(r.Tenant, r.Source, r.Key, r.HookID, r.Revision, r.TTLMs)
}

// ValidateSettle checks a settle in either of its forms (a SettleRequest,
// or a settle item aliasing a batch frame).
func ValidateSettle[S ~string | ~[]byte](tenant, source, key, hookID S, revision uint64, ttlMs int64) error {
	if revision == 0 {
		return fmt.Errorf("%w: settle: revision must be >= 1", ErrInvalid)
	}
	if ttlMs < 0 {
		return fmt.Errorf("%w: settle: ttl_ms must be >= 0, got %d", ErrInvalid, ttlMs)
	}
	return ValidateClaim(tenant, source, key, hookID, 0, 0)
}

// ChargeList is a hit's charges in either of its forms: decoded from JSON
// (strings) or aliasing a batch frame (bytes, checked without allocating).
type ChargeList[S ~string | ~[]byte] interface {
	// Len is the number of charges.
	Len() int
	// At is charge i.
	At(i int) (kind, tenant S, inc, capacity int64)
}

// ValidateCharges checks the charges of a hit whose tenant is tenant (the
// claim's, else the first charge's); claim: the hit carries a claim (then
// no charge is fine).
func ValidateCharges[S ~string | ~[]byte, L ChargeList[S]](l L, tenant S, claim bool) error {
	n := l.Len()
	if n == 0 && !claim {
		return fmt.Errorf("%w: no charges and no claim", ErrInvalid)
	}
	if n > MaxCharges {
		return fmt.Errorf("%w: at most %d charges, got %d", ErrInvalid, MaxCharges, n)
	}
	for i := range n {
		kind, t, inc, capacity := l.At(i)
		switch {
		case len(t) == 0:
			return fmt.Errorf("%w: charges[%d].tenant is empty", ErrInvalid, i)
		case len(t) > MaxNameBytes:
			return fmt.Errorf("%w: charges[%d].tenant must be 1..%d bytes", ErrInvalid, i, MaxNameBytes)
		case len(kind) == 0 || len(kind) > MaxKindBytes:
			return fmt.Errorf("%w: charges[%d].kind must be 1..%d bytes", ErrInvalid, i, MaxKindBytes)
		case string(t) != string(tenant):
			return fmt.Errorf("%w: all charges must belong to one tenant", ErrInvalid)
		case inc <= 0 || capacity <= 0:
			return fmt.Errorf("%w: charges[%d]: increment_us and capacity_us must be > 0", ErrInvalid, i)
		case inc > capacity:
			return fmt.Errorf("%w: charges[%d]: increment_us > capacity_us can never pass", ErrInvalid, i)
		}
		for j := range i {
			if k, _, _, _ := l.At(j); string(k) == string(kind) {
				return fmt.Errorf("%w: charges[%d]: kind charged twice (%q)", ErrInvalid, i, kind)
			}
		}
	}
	return nil
}

// jsonCharges is the ChargeList of a HitRequest.
type jsonCharges []Charge

func (cs jsonCharges) Len() int { return len(cs) }

func (cs jsonCharges) At(i int) (kind, tenant string, inc, capacity int64) {
	c := &cs[i]
	return c.Kind, c.Tenant, c.IncrementUs, c.CapacityUs
}

// Validate checks a reset request: a tenant of 1..MaxNameBytes bytes.
func (r *ResetRequest) Validate() error { return validateName("tenant", r.Tenant) }

// Validate checks a release or count request: a principal and a key of
// 1..MaxNameBytes bytes each, a request id of at most MaxRequestIDBytes.
func (r *CounterRequest) Validate() error {
	if err := validateName("principal", r.Principal); err != nil {
		return err
	}
	if len(r.RequestID) > MaxRequestIDBytes {
		return fmt.Errorf("%w: request_id must be at most %d bytes", ErrInvalid, MaxRequestIDBytes)
	}
	return validateName("key", r.Key)
}

// Validate checks a reserve request: a counter (see CounterRequest.Validate),
// max >= 1 (at most MaxNamedSlots with a request id) and ttl_ms >= 0.
func (r *ReserveRequest) Validate() error {
	if err := (&CounterRequest{Principal: r.Principal, Key: r.Key, RequestID: r.RequestID}).Validate(); err != nil {
		return err
	}
	switch {
	case r.RequestID != "" && r.Max > MaxNamedSlots:
		return fmt.Errorf("%w: a reserve with a request_id needs max <= %d, got %d", ErrInvalid, MaxNamedSlots, r.Max)
	case r.Max < 1:
		return fmt.Errorf("%w: max must be >= 1, got %d", ErrInvalid, r.Max)
	case r.TTLMs < 0:
		return fmt.Errorf("%w: ttl_ms must be >= 0, got %d", ErrInvalid, r.TTLMs)
	}
	return nil
}

// validateName checks a name field: 1..MaxNameBytes bytes (any bytes).
func validateName(field, s string) error {
	if s == "" || len(s) > MaxNameBytes {
		return fmt.Errorf("%w: %s must be 1..%d bytes, got %d", ErrInvalid, field, MaxNameBytes, len(s))
	}
	return nil
}
