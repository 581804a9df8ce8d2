package names

import (
	"strings"
	"testing"
)

// TestNormalizeKey: a key up to MaxKey bytes is kept; a longer one is its
// SHA-256 in lowercase hex behind "sha256:".
func TestNormalizeKey(t *testing.T) {
	for _, k := range []string{"", "a", strings.Repeat("k", MaxKey)} {
		if got := NormalizeKey(k); got != k {
			t.Errorf("NormalizeKey(len %d) = %q, want the key", len(k), got)
		}
	}
	// sha256 of 201 bytes "a", from sha256sum.
	const want = "sha256:a92efd82109373e58f9a2056dee01e807e216ce6075f7051207c0a9f7d666e50"
	if got := NormalizeKey(strings.Repeat("a", MaxKey+1)); got != want {
		t.Fatalf("NormalizeKey(len %d) = %q, want %q", MaxKey+1, got, want)
	}
}
