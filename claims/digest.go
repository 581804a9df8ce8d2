package claims

import (
	"fmt"

	"github.com/sluice-dev/sluice/protocol"
)

// MaxDigestBytes bounds a digest kept with a committed claim.
const MaxDigestBytes = 128

// ValidateDigest checks a request digest: empty (none), or 1..MaxDigestBytes
// bytes of printable ASCII without spaces (e.g. "sha256:<hex>"), so that it
// reads back byte for byte and prints safely. The error wraps protocol.ErrInvalid.
func ValidateDigest(digest string) error {
	if len(digest) > MaxDigestBytes {
		return fmt.Errorf("%w: digest must be at most %d bytes", protocol.ErrInvalid, MaxDigestBytes)
	}
	for i := 0; i < len(digest); i++ {
		if c := digest[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: digest must be printable ASCII without spaces", protocol.ErrInvalid)
		}
	}
	return nil
}
