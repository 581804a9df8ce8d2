package claims_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/claims"
)

// kvKeyRe is nats.go's KV key rule; kvKeyValid adds its checks for empty
// tokens (jetstream.keyValid).
var kvKeyRe = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func kvKeyValid(k string) bool {
	return k != "" && k[0] != '.' && k[len(k)-1] != '.' && !strings.Contains(k, "..") && kvKeyRe.MatchString(k)
}

// tokensSafe: exactly n '.'-separated tokens, each non-empty and of the
// codec's alphabet (no '/', no wildcard, nothing a subject could misread).
func tokensSafe(k string, n int) bool {
	toks := strings.Split(k, ".")
	if len(toks) != n {
		return false
	}
	for _, tok := range toks {
		if tok == "" || strings.Trim(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_=-") != "" {
			return false
		}
	}
	return true
}

func normalized(id claims.ID) claims.ID {
	id.Key = claims.NormalizeKey(id.Key)
	return id
}

// FuzzKVKey: no two distinct IDs (after key normalization, which the wire
// contract defines) share a KV key, every key is a valid KV key of exactly
// three safe tokens, and ParseKVKey gives the ID back. The same for replay
// keys over (namespace, key).
//
//	go test -run='^$' -fuzz=FuzzKVKey -fuzztime=60s ./claims/
func FuzzKVKey(f *testing.F) {
	seeds := [][6]string{
		{"a.b", "c", "k", "a", "b.c", "k"},
		{"a", "b", "c.k", "a.b", "c", "k"},
		{"*", ">", "k", "=2A", "=3E", "k"},
		{"=", "", "k", "", "=", "k"},
		{".", "s", "k", "=2E", "s", "k"},
		{"t\x00", "s", "k", "t", "\x00s", "k"},
		{"é", "s", "k", "e\u0301", "s", "k"},
		{"t", "s", strings.Repeat("k", 201), "t", "s", claims.NormalizeKey(strings.Repeat("k", 201))},
		{"t", "s", strings.Repeat("k", 200), "t", "s", strings.Repeat("k", 201)},
		{"$KV", "s", "$JS.API.>", "t", "s", "../../x"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5])
	}
	f.Fuzz(func(t *testing.T, t1, s1, k1, t2, s2, k2 string) {
		a := claims.ID{Tenant: t1, Source: s1, Key: k1}
		b := claims.ID{Tenant: t2, Source: s2, Key: k2}
		ka, kb := claims.KVKey(a), claims.KVKey(b)
		for _, k := range []string{ka, kb} {
			if !kvKeyValid(k) || !tokensSafe(k, 3) {
				t.Fatalf("KVKey gave an unsafe key %q", k)
			}
		}
		if (normalized(a) == normalized(b)) != (ka == kb) {
			t.Fatalf("KVKey(%q) = %q, KVKey(%q) = %q: equal keys iff equal IDs", a, ka, b, kb)
		}
		if a.Validate() == nil {
			if got, err := claims.ParseKVKey(ka); err != nil || got != normalized(a) {
				t.Fatalf("ParseKVKey(%q) = %q, %v; want %q", ka, got, err, normalized(a))
			}
		}
		ra, rb := claims.ReplayKVKey(t1, k1), claims.ReplayKVKey(t2, k2)
		if !kvKeyValid(ra) || !tokensSafe(ra, 2) {
			t.Fatalf("ReplayKVKey gave an unsafe key %q", ra)
		}
		if (t1 == t2 && k1 == k2) != (ra == rb) {
			t.Fatalf("ReplayKVKey(%q, %q) = %q, ReplayKVKey(%q, %q) = %q", t1, k1, ra, t2, k2, rb)
		}
	})
}
