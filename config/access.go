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

// HookMethods are the methods a source may accept (methods:); POST is the
// default.
var HookMethods = []string{"POST", "PUT", "PATCH"}

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
	for _, m := range methods {
		m = strings.ToUpper(m)
		if !slices.Contains(HookMethods, m) {
			return Access{}, &AccessError{"methods", fmt.Sprintf("%.16q is not one of %s", m, strings.Join(HookMethods, ", "))}
		}
		if !slices.Contains(a.Methods, m) {
			a.Methods = append(a.Methods, m)
		}
	}
	if methods != nil && len(a.Methods) == 0 {
		return Access{}, &AccessError{"methods", "give at least one method (or leave it out: POST)"}
	}
	if len(contentTypes) > MaxContentTypes {
		return Access{}, &AccessError{"content_types", fmt.Sprintf("at most %d", MaxContentTypes)}
	}
	for _, ct := range contentTypes {
		mt, params, err := mime.ParseMediaType(ct)
		typ, sub, ok := strings.Cut(mt, "/")
		if err != nil || len(params) > 0 || !ok || typ == "*" || sub == "" || len(ct) > 128 {
			return Access{}, &AccessError{"content_types", fmt.Sprintf("%.64q is not a media type such as application/json or text/* (no parameters)", ct)}
		}
		a.ContentTypes = append(a.ContentTypes, mt)
	}
	if contentTypes != nil && len(a.ContentTypes) == 0 {
		return Access{}, &AccessError{"content_types", "give at least one media type (or leave it out: any)"}
	}
	if len(ipAllow) > MaxIPAllow {
		return Access{}, &AccessError{"ip_allow", fmt.Sprintf("at most %d prefixes", MaxIPAllow)}
	}
	for _, s := range ipAllow {
		p, err := ParsePrefix(s)
		if err != nil {
			return Access{}, &AccessError{"ip_allow", err.Error()}
		}
		a.IPAllow = append(a.IPAllow, p)
	}
	if ipAllow != nil && len(a.IPAllow) == 0 {
		return Access{}, &AccessError{"ip_allow", "give at least one prefix (or leave it out: any address)"}
	}
	return a, nil
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
