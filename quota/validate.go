package quota

import (
	"fmt"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// Bounds of a request (docs/PROTOCOL.md). Every check of a request on any
// path — the Client before sending, the owner on a JSON request or a batch
// frame, the sluice.v1.quota.* service — is one of the functions below.
const (
	// MaxCharges bounds the charges of one hit.
	MaxCharges = frame.MaxCharges
	// MaxKindBytes bounds a charge's kind (it is kept per partition).
	MaxKindBytes = 64
	// MaxNameBytes bounds tenants, principals and counter keys.
	MaxNameBytes = 256
)

// Validate checks a hit request: at least one charge or a claim; at most
// MaxCharges charges, each with a kind of 1..MaxKindBytes bytes charged
// once, a tenant of 1..MaxNameBytes bytes, and 0 < increment <= capacity;
// all charges for one tenant (the claim's, when there is one); a claim with
// tenant, source, key and hook id that the claims store accepts, and ttls
// >= 0. Errors wrap ErrInvalid.
func (r *HitRequest) Validate() error {
	tenant := ""
	if r.Claim != nil {
		tenant = r.Claim.Tenant
	} else if len(r.Charges) > 0 {
		tenant = r.Charges[0].Tenant
	}
	if err := validateCharges(jsonCharges(r.Charges), tenant, r.Claim != nil); err != nil {
		return err
	}
	if c := r.Claim; c != nil {
		return validateClaim(c.Tenant, c.Source, c.Key, c.HookID, c.TTLMs, c.PendingTTLMs)
	}
	return nil
}

// validateClaim checks a hit's claim in either of its forms (decoded from
// JSON, or aliasing a batch frame: checked without allocating).
func validateClaim[S ~string | ~[]byte](tenant, source, key, hookID S, ttlMs, pendingMs int64) error {
	if len(tenant) == 0 || len(source) == 0 || len(key) == 0 || len(hookID) == 0 {
		return fmt.Errorf("%w: claim needs tenant, source, key and hook_id", ErrInvalid)
	}
	if ttlMs < 0 || pendingMs < 0 {
		return fmt.Errorf("%w: claim ttl_ms and pending_ttl_ms must be >= 0", ErrInvalid)
	}
	// Checked before any charge is taken (claims.Store would refuse it
	// only after).
	if err := (claims.ID{Tenant: string(tenant), Source: string(source), Key: string(key)}).Validate(); err != nil {
		return fmt.Errorf("%w: claim: %w", ErrInvalid, err)
	}
	if err := claims.ValidateHookID(string(hookID)); err != nil {
		return fmt.Errorf("%w: claim: %w", ErrInvalid, err)
	}
	return nil
}

// Validate checks a settle: tenant, source, key and hook id as a hit's
// claim, a revision >= 1 and ttl_ms >= 0 (claims.settle's rules). Errors
// wrap ErrInvalid.
func (r *SettleRequest) Validate() error {
	return validateSettle(r.Tenant, r.Source, r.Key, r.HookID, r.Revision, r.TTLMs)
}

// validateSettle checks a settle in either of its forms (a SettleRequest,
// or a settle item aliasing a batch frame).
func validateSettle[S ~string | ~[]byte](tenant, source, key, hookID S, revision uint64, ttlMs int64) error {
	if revision == 0 {
		return fmt.Errorf("%w: settle: revision must be >= 1", ErrInvalid)
	}
	if ttlMs < 0 {
		return fmt.Errorf("%w: settle: ttl_ms must be >= 0, got %d", ErrInvalid, ttlMs)
	}
	return validateClaim(tenant, source, key, hookID, 0, 0)
}

// chargeList is a hit's charges in either of its forms: decoded from JSON
// (strings) or aliasing a batch frame (bytes, checked without allocating).
type chargeList[S ~string | ~[]byte] interface {
	len() int
	at(i int) (kind, tenant S, inc, capacity int64)
}

// validateCharges checks the charges of a hit whose tenant is tenant (the
// claim's, else the first charge's); claim: the hit carries a claim (then
// no charge is fine).
func validateCharges[S ~string | ~[]byte, L chargeList[S]](l L, tenant S, claim bool) error {
	n := l.len()
	if n == 0 && !claim {
		return fmt.Errorf("%w: no charges and no claim", ErrInvalid)
	}
	if n > MaxCharges {
		return fmt.Errorf("%w: at most %d charges, got %d", ErrInvalid, MaxCharges, n)
	}
	for i := range n {
		kind, t, inc, capacity := l.at(i)
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
			if k, _, _, _ := l.at(j); string(k) == string(kind) {
				return fmt.Errorf("%w: charges[%d]: kind charged twice (%q)", ErrInvalid, i, kind)
			}
		}
	}
	return nil
}

// jsonCharges is the chargeList of a HitRequest.
type jsonCharges []Charge

func (cs jsonCharges) len() int { return len(cs) }

func (cs jsonCharges) at(i int) (kind, tenant string, inc, capacity int64) {
	c := &cs[i]
	return c.Kind, c.Tenant, c.IncrementUs, c.CapacityUs
}

// Validate checks a reset request: a tenant of 1..MaxNameBytes bytes.
func (r *ResetRequest) Validate() error { return validateName("tenant", r.Tenant) }

// Validate checks a release or count request: a principal and a key of
// 1..MaxNameBytes bytes each.
func (r *CounterRequest) Validate() error {
	if err := validateName("principal", r.Principal); err != nil {
		return err
	}
	if err := validateRequestID(r.RequestID); err != nil {
		return err
	}
	return validateName("key", r.Key)
}

// MaxRequestIDBytes bounds a counter request id; MaxNamedSlots bounds the
// named slots of one counter (a reserve naming a slot needs max <= it).
const (
	MaxRequestIDBytes = 64
	MaxNamedSlots     = 1024
)

func validateRequestID(id string) error {
	if len(id) > MaxRequestIDBytes {
		return fmt.Errorf("%w: request_id must be at most %d bytes", ErrInvalid, MaxRequestIDBytes)
	}
	return nil
}

// Validate checks a reserve request: a counter (see CounterRequest.Validate),
// max >= 1 and ttl_ms >= 0.
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

func validateName(field, v string) error {
	if v == "" || len(v) > MaxNameBytes {
		return fmt.Errorf("%w: %s must be 1..%d bytes", ErrInvalid, field, MaxNameBytes)
	}
	return nil
}
