package claims

import (
	"fmt"
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
