package names

import "testing"

// TestCharset: the bounds, letters and digits, the extra bytes and nothing
// else; HTTPToken is RFC 9110's tchar set.
func TestCharset(t *testing.T) {
	for _, c := range []struct {
		s     string
		max   int
		extra string
		want  bool
	}{
		{"", 0, "", false},
		{"aZ09", 4, "", true},
		{"aZ09x", 4, "", false},
		{"aZ09x", 0, "", true},
		{"a_b", 0, "_", true},
		{"a-b", 0, "_", false},
		{"a b", 0, "_", false},
		{"é", 0, "", false},
	} {
		if got := Charset(c.s, c.max, c.extra); got != c.want {
			t.Errorf("Charset(%q, %d, %q) = %v", c.s, c.max, c.extra, got)
		}
	}
	for s, want := range map[string]bool{"X-Hub-Signature-256": true, "!#$%&'*+-.^_`|~": true, "a:b": false, "a b": false, `a"b`: false, "(a)": false} {
		if got := HTTPToken(s, 0); got != want {
			t.Errorf("HTTPToken(%q) = %v", s, got)
		}
	}
}
