package claims

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// MaxTTL caps every TTL a store applies (pending, committed and replay
// retention). It is whole seconds. nats-server computes a message's expiry
// in int64 nanoseconds since 1970, which overflows for TTLs of a few
// hundred years; longer TTLs are silently shortened to MaxTTL.
const MaxTTL = 100 * 365 * 24 * time.Hour

// CommittedTTL is the TTL of a claim settled with ttl_ms ttlMs (>= 0,
// checked by the caller): def when it is 0, at most MaxTTL.
func CommittedTTL(ttlMs int64, def time.Duration) time.Duration {
	switch {
	case ttlMs >= MaxTTL.Milliseconds():
		return MaxTTL
	case ttlMs > 0:
		return time.Duration(ttlMs) * time.Millisecond
	}
	return def
}

// normTTL is the TTL a store applies for d: rounded up to whole seconds,
// at least 1 s, at most MaxTTL. A negative d is protocol.ErrInvalid.
func normTTL(d time.Duration) (time.Duration, error) {
	if d < 0 {
		return 0, fmt.Errorf("%w: negative TTL %v", protocol.ErrInvalid, d)
	}
	if d > MaxTTL {
		d = MaxTTL
	}
	return kvstore.RoundTTL(d), nil
}

// KVKey is the KV key of a dedupe claim:
// protocol.Join(tenant, source, NormalizeKey(key)). Every part is encoded by
// the kvstore token codec, so no input can add a token, become a wildcard
// or reach another tenant's keys. Two IDs share a key iff their tenants and
// sources are equal and their keys normalize to the same string (a key over
// MaxKeyBytes and the literal "sha256:<hex>" of it are the same claim, by
// the wire contract).
func KVKey(id ID) string {
	return protocol.Join(id.Tenant, id.Source, NormalizeKey(id.Key))
}

// ParseKVKey reverses KVKey (the key comes back normalized). It lets a
// watcher of the claims bucket (expiry markers) name the claim. The error
// wraps protocol.ErrInvalid for a key KVKey cannot have produced.
func ParseKVKey(key string) (ID, error) {
	parts, err := protocol.Split(key)
	if err != nil || len(parts) != 3 {
		return ID{}, fmt.Errorf("%w: not a claim key: %q", protocol.ErrInvalid, key)
	}
	id := ID{Tenant: parts[0], Source: parts[1], Key: parts[2]}
	if err := id.Validate(); err != nil || NormalizeKey(id.Key) != id.Key {
		return ID{}, fmt.Errorf("%w: not a claim key: %q", protocol.ErrInvalid, key)
	}
	return id, nil
}

// ReplayKVKey is the KV key of a replay claim: protocol.Join(namespace, key).
func ReplayKVKey(namespace, key string) string {
	return protocol.Join(namespace, key)
}

// Stored value of a dedupe claim, readable with `nats kv get`:
// {"s":"p","h":"<hook id>"} while pending, {"s":"c","h":"<hook id>"} once
// committed, {"s":"c","h":"<hook id>","d":"<digest>"} once committed by
// SettleOwn with a digest. A record without "d" (settled without one)
// reads as a claim without a digest.
type claimValue struct {
	S string `json:"s"`
	H string `json:"h"`
	D string `json:"d,omitempty"`
}

const (
	valuePending   = "p"
	valueCommitted = "c"
)

func encodeValue(state, hookID string) []byte {
	return claimValue{S: state, H: hookID}.encode()
}

func (v claimValue) encode() []byte {
	b, err := json.Marshal(v)
	if err != nil { // a struct of strings always marshals
		panic(err)
	}
	return b
}

// decodeValue parses a stored claim; ok is false for anything this package
// did not write.
func decodeValue(b []byte) (claimValue, bool) {
	var v claimValue
	if err := json.Unmarshal(b, &v); err != nil {
		return claimValue{}, false
	}
	if (v.S != valuePending && v.S != valueCommitted) || v.H == "" {
		return claimValue{}, false
	}
	return v, true
}

func (v claimValue) stateName() string {
	if v.S == valueCommitted {
		return protocol.StateCommitted
	}
	return protocol.StatePending
}

// retryAfter is how long until expires, at least 1 ms.
func retryAfter(expires, now time.Time) time.Duration {
	d := expires.Sub(now)
	if d < time.Millisecond {
		return time.Millisecond
	}
	return d
}

// expiresIn is how long until expires, never negative.
func expiresIn(expires, now time.Time) time.Duration {
	if expires.IsZero() {
		return 0
	}
	if d := expires.Sub(now); d > 0 {
		return d
	}
	return 0
}
