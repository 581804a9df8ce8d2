package config

import (
	"fmt"
	"mime"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/webhook"
)

// Bounds of a source's access policy.
const (
	MaxContentTypes = 32
	MaxIPAllow      = 256
)

// HookMethods returns the methods a source may accept (methods:); POST is the
// default.
func HookMethods() []string { return []string{"POST", "PUT", "PATCH"} }

// Access is a source's request policy, checked before the body is read and
// before any charge or claim: its methods (405), content types (415) and
// client addresses (403). The zero Access is POST only, any content type,
// any address.
type Access struct {
	// Methods accepted (nil: POST).
	Methods []string
	// ContentTypes accepted, media types without parameters, lower case,
	// "type/*" for a whole type (nil: any).
	ContentTypes []string
	// IPAllow are the client prefixes accepted (nil: any).
	IPAllow []netip.Prefix
}

// Handshakes a source may answer (handshake:).
const (
	// HandshakeSlack answers a (verified) POST {"type":"url_verification",
	// "challenge":C} with {"challenge":C}.
	HandshakeSlack = "slack"
	// HandshakeCRC answers GET ?crc_token=T with {"response_token":
	// "sha256=" + base64(HMAC-SHA256(secret, T))} (Twitter's CRC).
	HandshakeCRC = "crc"
)

// CheckHandshake validates a source's handshake against its resolved
// verification scheme (nil: unsigned): crc needs a scheme that can answer
// it safely (webhook.CRCCapable: HMAC-SHA256 of the body).
func CheckHandshake(kind string, scheme *webhook.Scheme) error {
	switch kind {
	case HandshakeSlack:
		return nil
	case HandshakeCRC:
		if scheme == nil || !webhook.CRCCapable(*scheme) {
			return fmt.Errorf("crc needs verify with an hmac-sha256 scheme that signs exactly {body} (the CRC answer uses its secret)")
		}
		return nil
	}
	return fmt.Errorf("unknown handshake %.32q (want slack or crc)", kind)
}

// AccessError is ParseAccess's error: Field is "methods", "content_types"
// or "ip_allow".
type AccessError struct {
	Field, Reason string
}

func (e *AccessError) Error() string { return e.Field + ": " + e.Reason }

// ParseAccess validates and canonicalises a source's methods,
// content_types and ip_allow (the one reading for the file and source
// records).
func ParseAccess(methods, contentTypes, ipAllow []string) (Access, error) {
	var a Access
	var err error
	a.Methods, err = accessList("methods", methods, 0, "", "give at least one method (or leave it out: POST)", func(m string, got []string) (string, bool, string) {
		m = strings.ToUpper(m)
		if !slices.Contains(HookMethods(), m) {
			return "", false, fmt.Sprintf("%.16q is not one of %s", m, strings.Join(HookMethods(), ", "))
		}
		return m, !slices.Contains(got, m), ""
	})
	if err != nil {
		return Access{}, err
	}
	a.ContentTypes, err = accessList("content_types", contentTypes, MaxContentTypes, fmt.Sprintf("at most %d", MaxContentTypes), "give at least one media type (or leave it out: any)", func(ct string, _ []string) (string, bool, string) {
		mt, params, err := mime.ParseMediaType(ct)
		typ, sub, ok := strings.Cut(mt, "/")
		if err != nil || len(params) > 0 || !ok || typ == "*" || sub == "" || len(ct) > 128 {
			return "", false, fmt.Sprintf("%.64q is not a media type such as application/json or text/* (no parameters)", ct)
		}
		return mt, true, ""
	})
	if err != nil {
		return Access{}, err
	}
	a.IPAllow, err = accessList("ip_allow", ipAllow, MaxIPAllow, fmt.Sprintf("at most %d prefixes", MaxIPAllow), "give at least one prefix (or leave it out: any address)", func(s string, _ []netip.Prefix) (netip.Prefix, bool, string) {
		p, err := ParsePrefix(s)
		if err != nil {
			return p, false, err.Error()
		}
		return p, true, ""
	})
	if err != nil {
		return Access{}, err
	}
	return a, nil
}

// accessList is the one reading of an access list named field: left out
// (nil) it is nil; given, it has at most max entries (0: no bound; else
// tooMany), each read by parse (which sees the entries kept so far and
// says whether to keep it, or why it is invalid), and keeps at least one
// (else none).
func accessList[T any](field string, in []string, max int, tooMany, none string, parse func(s string, got []T) (T, bool, string)) ([]T, error) {
	if max > 0 && len(in) > max {
		return nil, &AccessError{field, tooMany}
	}
	var out []T
	for _, s := range in {
		v, keep, bad := parse(s, out)
		if bad != "" {
			return nil, &AccessError{field, bad}
		}
		if keep {
			out = append(out, v)
		}
	}
	if in != nil && len(out) == 0 {
		return nil, &AccessError{field, none}
	}
	return out, nil
}

// ParsePrefix parses a CIDR ("203.0.113.0/24", "2001:db8::/32") or a single
// address (a /32 or /128), masked.
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%.64q is not an IP address or CIDR", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%.64q is not an IP address or CIDR", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%.64q: write IPv4 prefixes as IPv4", s)
	}
	return p.Masked(), nil
}

// String describes a (for configuration diffs).
func (a Access) String() string {
	return fmt.Sprint(a.Methods, a.ContentTypes, a.IPAllow)
}
