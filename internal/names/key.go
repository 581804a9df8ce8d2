package names

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxKey is the longest dedupe (or replay) key stored and used as is
// (claims.MaxKeyBytes, webhook.MaxKeyBytes).
const MaxKey = 200

// NormalizeKey returns key, or "sha256:<lowercase hex of SHA-256(key)>"
// when key is longer than MaxKey: the one rule behind claims.NormalizeKey
// and webhook.NormalizeKey.
func NormalizeKey(key string) string {
	if len(key) <= MaxKey {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}
