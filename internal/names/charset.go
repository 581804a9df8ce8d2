package names

import "strings"

// tokenExtra are the bytes besides letters and digits of an RFC 9110 token
// (an HTTP header field name).
const tokenExtra = "!#$%&'*+-.^_`|~"

// Charset reports whether s is 1..max bytes (max 0: any length), each an
// ASCII letter, an ASCII digit or one of extra.
func Charset(s string, max int, extra string) bool {
	if s == "" || max > 0 && len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

// HTTPToken reports whether s is an RFC 9110 token (a valid header field
// name) of 1..max bytes (max 0: any length).
func HTTPToken(s string, max int) bool { return Charset(s, max, tokenExtra) }
