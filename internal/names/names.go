// Package names holds the rules for the names sluice accepts from its
// users and operators: tenant and source names, domains. Each rule lives
// here once; kvstore, config and edge call it. (Subject prefixes are
// public contract: protocol.ValidatePrefix.)
package names

import (
	"fmt"

	"github.com/sluice-dev/sluice/protocol"
)

// MaxName bounds a tenant or source name (the HTTP path rule).
const MaxName = 128

// PlainToken reports whether tok is a non-empty run of [A-Za-z0-9_-].
func PlainToken(tok string) bool { return Charset(tok, 0, "_-") }

// NameByte reports whether c is one of [A-Za-z0-9._~-], the bytes
// docs/PROTOCOL.md allows in a tenant or source.
func NameByte(c byte) bool { return protocol.Plain(c) || c == '.' || c == '~' }

// ValidName reports whether s is a valid tenant or source name:
// 1..MaxName bytes of [A-Za-z0-9._~-], and not "." or ".." (path segments
// no URL can carry).
func ValidName(s string) bool {
	if s == "" || len(s) > MaxName || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !NameByte(s[i]) {
			return false
		}
	}
	return true
}

// MaxDomain bounds a JetStream domain and a leaf name (--leaf-name; a
// hub's domain is "hub").
const MaxDomain = 32

// ValidateDomain checks a JetStream domain or edge name: 1..MaxDomain bytes
// of [A-Za-z0-9_-] (one subject token: nats-server puts it in
// "$JS.<domain>.API").
func ValidateDomain(s string) error {
	if len(s) > MaxDomain || !PlainToken(s) {
		return fmt.Errorf("invalid name %q (1..%d bytes of [A-Za-z0-9_-])", s, MaxDomain)
	}
	return nil
}
