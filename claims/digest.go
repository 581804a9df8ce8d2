package claims

import (
	"context"
	"fmt"
	"time"
)

// MaxDigestBytes bounds a digest kept with a committed claim.
const MaxDigestBytes = 128

// ValidateDigest checks a request digest: empty (none), or 1..MaxDigestBytes
// bytes of printable ASCII without spaces (e.g. "sha256:<hex>"), so that it
// reads back byte for byte and prints safely. The error wraps ErrInvalid.
func ValidateDigest(digest string) error {
	if len(digest) > MaxDigestBytes {
		return fmt.Errorf("%w: digest must be at most %d bytes", ErrInvalid, MaxDigestBytes)
	}
	for i := 0; i < len(digest); i++ {
		if c := digest[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: digest must be printable ASCII without spaces", ErrInvalid)
		}
	}
	return nil
}

// DigestSettler is a Store that can keep, with a claim it commits, a
// digest of the request the claim was taken for — so that a later claimer
// of the same key can tell a retry of that request (the same digest) from
// another request reusing its key (the HTTP edge answers the latter 422,
// as the IETF Idempotency-Key draft says). The digest is opaque to the
// store: it is kept in the committed record and read back by Get
// (State.Digest) until the claim expires or is released. Call it through
// SettleOwnDigest.
type DigestSettler interface {
	// SettleOwnDigest is OwnSettler.SettleOwn that also keeps digest
	// (ValidateDigest; "" keeps none, exactly SettleOwn). Errors as
	// SettleOwn's, and ErrInvalid for a malformed digest.
	SettleOwnDigest(ctx context.Context, id ID, hookID, digest string, rev uint64, ttl time.Duration) error
}

// SettleOwnDigest settles a claim the caller took itself (see SettleOwn)
// keeping digest in the committed record when s is a DigestSettler. A store
// that keeps no digests (or digest "") is settled with SettleOwn: its
// claim then reads back without a digest, like a record written before
// digests were kept.
func SettleOwnDigest(ctx context.Context, s Store, id ID, hookID, digest string, rev uint64, ttl time.Duration) error {
	if d, ok := s.(DigestSettler); ok && digest != "" {
		return d.SettleOwnDigest(ctx, id, hookID, digest, rev, ttl)
	}
	return SettleOwn(ctx, s, id, hookID, rev, ttl)
}
