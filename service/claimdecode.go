package service

import (
	"bytes"
	"encoding/json"

	"github.com/sluice-dev/sluice/internal/claimwire"
)

// canonicalClaim is a claims.settle or claims.release body in the encoding
// the Go client sends.
type canonicalClaim = claimwire.Request

// decodeClaim decodes a settle or release body into req. A body that is
// exactly the canonical encoding of what it decodes to — the Go client's
// bytes — is decoded with one json.Unmarshal: re-encoded, it gives the same
// bytes, so its member names are exact, none is unknown or repeated, every
// number is an integer in range and every string valid UTF-8, and
// decodeStrict would decode it the same. Any other body goes through
// decodeStrict (its rules and its error texts). Measured on the durable
// claim cycle: decodeStrict was 8.8% of the edge's CPU (pprof).
func decodeClaim(data []byte, req *claimRequest) error {
	if len(data) <= MaxRequestBytes {
		var c canonicalClaim
		if json.Unmarshal(data, &c) == nil {
			if again, err := json.Marshal(c); err == nil && bytes.Equal(again, data) {
				*req = claimRequest(c)
				return nil
			}
		}
	}
	*req = claimRequest{}
	return decodeStrict(data, req)
}
