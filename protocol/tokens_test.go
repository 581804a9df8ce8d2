package protocol

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEncodeTokenTable(t *testing.T) {
	cases := []struct{ in, want string }{
		{"acme", "acme"},
		{"", "="},
		{"a.b", "a=2Eb"},
		{"a.>", "a=2E=3E"},
		{"*", "=2A"},
		{"=", "=3D"},
		{"a b", "a=20b"},
		{"x/y", "x=2Fy"},
		{"\x00", "=00"},
		{"é", "=C3=A9"},
		{"Tenant_1-2", "Tenant_1-2"},
	}
	for _, c := range cases {
		if got := EncodeToken(c.in); got != c.want {
			t.Errorf("EncodeToken(%q) = %q, want %q", c.in, got, c.want)
		}
		back, err := DecodeToken(c.want)
		if err != nil || back != c.in {
			t.Errorf("DecodeToken(%q) = %q, %v; want %q", c.want, back, err, c.in)
		}
		if encodedLen(c.in) != len(c.want) {
			t.Errorf("encodedLen(%q) = %d, want %d", c.in, encodedLen(c.in), len(c.want))
		}
	}
}

func TestDecodeTokenRejectsNonCanonical(t *testing.T) {
	for _, bad := range []string{"", "a.b", "=4", "=zz", "=41" /* 'A' needlessly escaped */, "a*", "=2a", "a=", "==", " "} {
		if _, err := DecodeToken(bad); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("DecodeToken(%q) err = %v, want ErrInvalidToken", bad, err)
		}
	}
}

func TestJoinNeverCollides(t *testing.T) {
	a := Join("a.b", "c")
	b := Join("a", "b.c")
	c := Join("a", "b", "c")
	if a == b || b == c || a == c {
		t.Fatalf("collision: %q %q %q", a, b, c)
	}
	parts, err := Split(a)
	if err != nil || len(parts) != 2 || parts[0] != "a.b" || parts[1] != "c" {
		t.Fatalf("Split(%q) = %v, %v", a, parts, err)
	}
	if Join("", "") != "=.=" {
		t.Fatalf("Join of empties = %q", Join("", ""))
	}
}

// safeToken reports whether s is a valid single KV-key/subject token.
func safeToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(Plain(c) || c == '=') {
			return false
		}
	}
	return true
}

func FuzzTokenCodec(f *testing.F) {
	for _, s := range []string{"", "acme", "a.b", "a.>", "*", ">", "=", "=2E", "a b\t", "\x00", "é日本", strings.Repeat("x", 300)} {
		f.Add(s, "other")
	}
	f.Fuzz(func(t *testing.T, s, other string) {
		enc := EncodeToken(s)
		if !safeToken(enc) {
			t.Fatalf("EncodeToken(%q) = %q is not a safe token", s, enc)
		}
		if strings.ContainsAny(enc, ".*> \t\r\n/") || !utf8.ValidString(enc) {
			t.Fatalf("EncodeToken(%q) = %q has a forbidden byte", s, enc)
		}
		dec, err := DecodeToken(enc)
		if err != nil || dec != s {
			t.Fatalf("round trip %q -> %q -> %q, %v", s, enc, dec, err)
		}
		if s != other && EncodeToken(other) == enc {
			t.Fatalf("collision: %q and %q both encode to %q", s, other, enc)
		}
		// Any string that decodes must re-encode to itself (bijection).
		if d, err := DecodeToken(s); err == nil && EncodeToken(d) != s {
			t.Fatalf("DecodeToken(%q) = %q re-encodes to %q", s, d, EncodeToken(d))
		}
		j := Join(s, other)
		parts, err := Split(j)
		if err != nil || len(parts) != 2 || parts[0] != s || parts[1] != other {
			t.Fatalf("Split(Join(%q,%q)) = %v, %v", s, other, parts, err)
		}
	})
}
