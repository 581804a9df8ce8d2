package webhook

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // HMAC-SHA1 only where a provider (Twilio) still signs with it
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/names"
)

// ErrInvalidScheme is returned by Scheme.Validate and NewSchemeVerifier for a
// scheme that cannot verify correctly (unknown algorithm, missing header, a
// template that signs no body, …): verification fails closed at start-up.
var ErrInvalidScheme = errors.New("webhook: invalid verification scheme")

// Scheme types.
const (
	// SchemeHMAC: a signature header holding HMACs of a template over the
	// request (body, timestamp, message id, URL, form parameters).
	SchemeHMAC = "hmac"
	// SchemeToken: a shared secret sent as is in a header (GitLab's
	// X-Gitlab-Token, an API key), optionally after a fixed prefix.
	SchemeToken = "token"
	// SchemeBasic: HTTP Basic authentication; the secret is "user:password".
	SchemeBasic = "basic"
)

// HMAC algorithms (Scheme.Algorithm).
const (
	AlgHMACSHA256 = "hmac-sha256"
	AlgHMACSHA512 = "hmac-sha512"
	// AlgHMACSHA1 exists for providers that still sign with it (Twilio);
	// prefer SHA-256 for any other.
	AlgHMACSHA1 = "hmac-sha1"
)

// Signature header formats (Scheme.Format).
const (
	// FormatSingle: the header (exactly one value) is Prefix followed by one
	// encoded signature.
	FormatSingle = "single"
	// FormatList: entries separated by Separator (several header values are
	// joined with it); an entry that starts with Prefix carries a signature,
	// others (other versions) are ignored. At most MaxSignatures entries.
	FormatList = "list"
	// FormatKV: comma-separated key=value items (Stripe's "t=…,v1=…"); the
	// item TimestampKey is the timestamp (exactly one), every SignatureKey
	// item a signature (at most MaxSignatures), other keys are ignored.
	FormatKV = "kv"
)

// Signature encodings (Scheme.Encoding).
const (
	EncodingHex    = "hex"    // either case
	EncodingBase64 = "base64" // standard alphabet, padded
)

// Secret encodings (Scheme.SecretEncoding): how the configured secret
// becomes the key.
const (
	SecretRaw    = "raw"    // the secret's bytes as is (the default)
	SecretBase64 = "base64" // standard base64, padded or not
	SecretWhsec  = "whsec"  // an optional "whsec_" prefix, then standard base64 (Standard Webhooks, Svix)
)

// Placeholders of a Scheme.Signed template; any other text is copied as is.
const (
	PartBody      = "{body}"      // the raw body
	PartTimestamp = "{timestamp}" // the signed timestamp, decimal Unix seconds as sent
	PartID        = "{id}"        // the IDHeader value
	PartURL       = "{url}"       // Scheme.URL, the public URL the provider was given
	// PartForm is the body parsed as application/x-www-form-urlencoded,
	// names sorted (byte order) and each name's values sorted, written as
	// name+value with no separator (Twilio). The concatenation is ambiguous
	// ("a=bc" and "ab=c" sign alike): that is the provider's scheme, so use
	// it only for a provider that signs that way.
	PartForm = "{form}"
)

// Bounds of a Scheme.
const (
	// DefaultMinSecretBytes is the shortest key (after SecretEncoding) a
	// Scheme accepts unless it sets MinSecretBytes.
	DefaultMinSecretBytes = 16
	// MaxTolerance bounds Scheme.Tolerance (it also bounds how long replay
	// claims are kept).
	MaxTolerance     = time.Hour
	maxTemplateBytes = 256
	maxPrefixBytes   = 64
	maxSecretBytes   = 4 << 10
)

// Scheme describes how a source's requests are verified, declaratively: the
// form a source record's `verify:` carries (see docs/PROTOCOL.md,
// "Declarative verification"). Presets (Preset) cover known providers; a
// Scheme never holds the secret. The zero Scheme is invalid.
type Scheme struct {
	// Name labels the scheme (Verifier.Name; empty: Type). With Type
	// empty it names a preset, and every other field set overrides the
	// preset's (Twilio's URL, an API key's header).
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// Type is SchemeHMAC, SchemeToken or SchemeBasic; empty for a preset.
	Type string `json:"type" yaml:"type"`
	// Header carries the signature (hmac) or the token (token). Basic
	// always uses Authorization (Header empty or "Authorization").
	Header string `json:"header,omitempty" yaml:"header,omitempty"`
	// Prefix precedes the signature (single, e.g. "sha256="), each list
	// entry (list, e.g. "v1,") or the token (token, e.g. "Bearer ").
	Prefix string `json:"prefix,omitempty" yaml:"prefix,omitempty"`
	// Format is FormatSingle, FormatList or FormatKV (hmac).
	Format string `json:"format,omitempty" yaml:"format,omitempty"`
	// Separator separates list entries (list), e.g. " ".
	Separator string `json:"separator,omitempty" yaml:"separator,omitempty"`
	// SignatureKey and TimestampKey name the kv items, e.g. "v1" and "t".
	SignatureKey string `json:"signature_key,omitempty" yaml:"signature_key,omitempty"`
	TimestampKey string `json:"timestamp_key,omitempty" yaml:"timestamp_key,omitempty"`
	// Encoding of each signature: EncodingHex or EncodingBase64 (hmac).
	Encoding string `json:"encoding,omitempty" yaml:"encoding,omitempty"`
	// Algorithm is AlgHMACSHA256, AlgHMACSHA512 or AlgHMACSHA1 (hmac).
	Algorithm string `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`
	// Signed is the template of what is signed, e.g. "{timestamp}.{body}",
	// "v0:{timestamp}:{body}", "{id}.{timestamp}.{body}", "{url}{form}"
	// (hmac). It must sign the body ({body} or {form}).
	Signed string `json:"signed,omitempty" yaml:"signed,omitempty"`
	// TimestampHeader carries the signed timestamp (Unix seconds) when it
	// is not a kv item. A timestamp must be signed ({timestamp}).
	TimestampHeader string `json:"timestamp_header,omitempty" yaml:"timestamp_header,omitempty"`
	// IDHeader carries the message id: signed as {id}, or (when no
	// timestamp is signed) only reported as Verified.MessageID.
	IDHeader string `json:"id_header,omitempty" yaml:"id_header,omitempty"`
	// IDJSON is a dot path into a signed JSON body whose value is the
	// message id (Stripe's "id"); exclusive with IDHeader.
	IDJSON string `json:"id_json,omitempty" yaml:"id_json,omitempty"`
	// Tolerance is the accepted skew, both ways, between a signed timestamp
	// and now: required with {timestamp}, whole seconds, 1s to
	// MaxTolerance.
	Tolerance time.Duration `json:"tolerance,omitempty" yaml:"tolerance,omitempty"`
	// URL is what {url} signs: the public URL the provider was given
	// (absolute http or https), never taken from the request's Host.
	URL string `json:"url,omitempty" yaml:"url,omitempty"`
	// SecretEncoding is SecretRaw (default), SecretBase64 or SecretWhsec.
	SecretEncoding string `json:"secret_encoding,omitempty" yaml:"secret_encoding,omitempty"`
	// MinSecretBytes is the shortest key accepted (the password, for
	// basic); 0 means DefaultMinSecretBytes. Presets whose provider issues
	// or lets users pick shorter secrets set it lower.
	MinSecretBytes int `json:"-" yaml:"-"`
	// Fallback names a second header family used when Header is absent and
	// Fallback.Header present (Standard Webhooks accepts Svix's names).
	Fallback *HeaderNames `json:"fallback,omitempty" yaml:"fallback,omitempty"`
}

// HeaderNames is a family of signature, timestamp and message-id headers.
type HeaderNames struct {
	Header          string `json:"header" yaml:"header"`
	TimestampHeader string `json:"timestamp_header,omitempty" yaml:"timestamp_header,omitempty"`
	IDHeader        string `json:"id_header,omitempty" yaml:"id_header,omitempty"`
}

// clone returns a copy of n (nil for nil).
func (n *HeaderNames) clone() *HeaderNames {
	if n == nil {
		return nil
	}
	c := *n
	return &c
}

// label is the scheme's name for errors and Verifier.Name.
func (s *Scheme) label() string {
	if s.Name != "" {
		return s.Name
	}
	if s.Type != "" {
		return s.Type
	}
	return "scheme"
}

// invalid returns an ErrInvalidScheme error about s.
func (s *Scheme) invalid(format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrInvalidScheme, s.label(), fmt.Sprintf(format, args...))
}

// Template part kinds.
const (
	partLit byte = iota
	partBody
	partTimestamp
	partID
	partURL
	partForm
)

var placeholders = map[string]byte{
	PartBody: partBody, PartTimestamp: partTimestamp, PartID: partID, PartURL: partURL, PartForm: partForm,
}

type part struct {
	kind byte
	lit  []byte
}

// compiled is a validated Scheme, ready to verify (without its key).
type compiled struct {
	s       Scheme
	parts   []part
	newHash func() hash.Hash
	macLen  int
	signs   map[byte]bool
	idPath  []string
}

// Validate reports whether s can verify correctly; every problem is an error
// wrapping ErrInvalidScheme (ErrUnknownVerifier for an unknown preset
// name). It does not need the secret.
func (s Scheme) Validate() error {
	_, err := compile(s)
	return err
}

func compile(s Scheme) (*compiled, error) {
	s, err := resolve(s)
	if err != nil {
		return nil, err
	}
	s.Fallback = s.Fallback.clone() // the verifier shares nothing with its caller
	c := &compiled{s: s, signs: map[byte]bool{}}
	if s.MinSecretBytes < 0 {
		return nil, s.invalid("min secret bytes must not be negative")
	}
	switch s.SecretEncoding {
	case "", SecretRaw, SecretBase64, SecretWhsec:
	default:
		return nil, s.invalid("unknown secret encoding %q (want raw, base64 or whsec)", s.SecretEncoding)
	}
	if err := checkHeader(&s, "id_header", s.IDHeader, false); err != nil {
		return nil, err
	}
	switch s.Type {
	case SchemeHMAC:
		err = compileHMAC(c)
	case SchemeToken:
		if err := checkHeader(&s, "header", s.Header, true); err != nil {
			return nil, err
		}
		if len(s.Prefix) > maxPrefixBytes {
			return nil, s.invalid("prefix longer than %d bytes", maxPrefixBytes)
		}
		err = onlyFields(&s, "prefix", "id_header")
	case SchemeBasic:
		if s.Header != "" && http.CanonicalHeaderKey(s.Header) != "Authorization" {
			return nil, s.invalid("basic uses the Authorization header, not %q", s.Header)
		}
		err = onlyFields(&s, "id_header")
	case "":
		err = s.invalid("type is missing (want hmac, token or basic)")
	default:
		err = s.invalid("unknown type %q (want hmac, token or basic)", s.Type)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// onlyFields fails when a token or basic scheme sets an HMAC-only field
// (a sign of a misread configuration).
func onlyFields(s *Scheme, allowed ...string) error {
	set := map[string]bool{
		"prefix": s.Prefix != "", "format": s.Format != "", "separator": s.Separator != "",
		"signature_key": s.SignatureKey != "", "timestamp_key": s.TimestampKey != "",
		"encoding": s.Encoding != "", "algorithm": s.Algorithm != "", "signed": s.Signed != "",
		"timestamp_header": s.TimestampHeader != "", "id_json": s.IDJSON != "",
		"tolerance": s.Tolerance != 0, "url": s.URL != "", "fallback": s.Fallback != nil,
		"id_header": s.IDHeader != "",
	}
	var bad []string
	for f, on := range set {
		if on && !slices.Contains(allowed, f) {
			bad = append(bad, f)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return s.invalid("%s does not use %s", s.Type, strings.Join(bad, ", "))
	}
	return nil
}

func checkHeader(s *Scheme, field, name string, required bool) error {
	if name == "" {
		if required {
			return s.invalid("%s is missing", field)
		}
		return nil
	}
	if !isToken(name) {
		return s.invalid("%s %q is not a header name", field, name)
	}
	return nil
}

func compileHMAC(c *compiled) error {
	s := &c.s
	switch s.Algorithm {
	case AlgHMACSHA256:
		c.newHash, c.macLen = sha256.New, sha256.Size
	case AlgHMACSHA512:
		c.newHash, c.macLen = sha512.New, sha512.Size
	case AlgHMACSHA1:
		c.newHash, c.macLen = sha1.New, sha1.Size
	case "":
		return s.invalid("algorithm is missing (want hmac-sha256, hmac-sha512 or hmac-sha1)")
	default:
		return s.invalid("unknown algorithm %q (want hmac-sha256, hmac-sha512 or hmac-sha1)", s.Algorithm)
	}
	if err := checkHeader(s, "header", s.Header, true); err != nil {
		return err
	}
	if err := checkHeader(s, "timestamp_header", s.TimestampHeader, false); err != nil {
		return err
	}
	switch s.Encoding {
	case EncodingHex, EncodingBase64:
	case "":
		return s.invalid("encoding is missing (want hex or base64)")
	default:
		return s.invalid("unknown encoding %q (want hex or base64)", s.Encoding)
	}
	if len(s.Prefix) > maxPrefixBytes {
		return s.invalid("prefix longer than %d bytes", maxPrefixBytes)
	}
	hasTSKey := false
	switch s.Format {
	case FormatSingle:
		if s.Separator != "" || s.SignatureKey != "" || s.TimestampKey != "" {
			return s.invalid("single format takes no separator, signature_key or timestamp_key")
		}
	case FormatList:
		if s.Separator == "" || len(s.Separator) > 4 || strings.Contains(s.Prefix, s.Separator) {
			return s.invalid("list format needs a separator of 1 to 4 bytes that is not part of the prefix")
		}
		if s.SignatureKey != "" || s.TimestampKey != "" {
			return s.invalid("list format takes no signature_key or timestamp_key")
		}
	case FormatKV:
		if s.SignatureKey == "" || strings.ContainsAny(s.SignatureKey, ",= ") || strings.ContainsAny(s.TimestampKey, ",= ") || s.SignatureKey == s.TimestampKey {
			return s.invalid("kv format needs a signature_key (and optional timestamp_key): distinct, without ',', '=' or spaces")
		}
		if s.Separator != "" || s.Prefix != "" {
			return s.invalid("kv format takes no separator or prefix")
		}
		hasTSKey = s.TimestampKey != ""
	case "":
		return s.invalid("format is missing (want single, list or kv)")
	default:
		return s.invalid("unknown format %q (want single, list or kv)", s.Format)
	}
	if err := compileTemplate(c); err != nil {
		return err
	}
	if !c.signs[partBody] && !c.signs[partForm] {
		return s.invalid("signed %q signs no body (want {body} or {form})", s.Signed)
	}
	if c.signs[partTimestamp] {
		if hasTSKey == (s.TimestampHeader != "") {
			return s.invalid("signed has {timestamp}: give exactly one of timestamp_header and timestamp_key")
		}
		if s.Tolerance < time.Second || s.Tolerance > MaxTolerance || s.Tolerance%time.Second != 0 {
			// Timestamps are whole seconds, and so is the tolerance.
			return s.invalid("signed has {timestamp}: tolerance must be whole seconds in [1s, %s], got %s", MaxTolerance, s.Tolerance)
		}
	} else {
		if hasTSKey || s.TimestampHeader != "" {
			return s.invalid("a timestamp that is not signed (no {timestamp} in signed) cannot be trusted")
		}
		if s.Tolerance != 0 {
			return s.invalid("tolerance without a signed timestamp")
		}
	}
	if c.signs[partID] != (s.IDHeader != "") && (c.signs[partID] || c.signs[partTimestamp]) {
		// {id} needs the header; and with a signed timestamp the id is
		// half of the replay key, so an unsigned id header would let a
		// replay pass as new.
		return s.invalid("id_header must be given and signed ({id}) together when a timestamp is signed")
	}
	if s.IDJSON != "" {
		if s.IDHeader != "" {
			return s.invalid("id_header and id_json are exclusive")
		}
		if !c.signs[partBody] {
			return s.invalid("id_json needs a signed {body}")
		}
		path := strings.Split(s.IDJSON, ".")
		if len(path) > maxJSONPathSegs || slices.Contains(path, "") {
			return s.invalid("id_json %q is not a dot path of at most %d non-empty segments", s.IDJSON, maxJSONPathSegs)
		}
		c.idPath = path
	}
	if c.signs[partURL] != (s.URL != "") {
		return s.invalid("url must be given and signed ({url}) together")
	}
	if s.URL != "" {
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" || u.User != nil {
			return s.invalid("url must be an absolute http(s) URL without user or fragment")
		}
	}
	if fb := s.Fallback; fb != nil {
		if err := checkHeader(s, "fallback.header", fb.Header, true); err != nil {
			return err
		}
		if (fb.TimestampHeader == "") != (s.TimestampHeader == "") || (fb.IDHeader == "") != (s.IDHeader == "") {
			return s.invalid("fallback must name the same kinds of headers as the scheme")
		}
		if err := checkHeader(s, "fallback.timestamp_header", fb.TimestampHeader, false); err != nil {
			return err
		}
		if err := checkHeader(s, "fallback.id_header", fb.IDHeader, false); err != nil {
			return err
		}
	}
	return nil
}

// compileTemplate parses s.Signed into parts; each placeholder at most once.
func compileTemplate(c *compiled) error {
	s := &c.s
	t := s.Signed
	if t == "" {
		return s.invalid("signed is missing (e.g. \"{body}\" or \"{timestamp}.{body}\")")
	}
	if len(t) > maxTemplateBytes {
		return s.invalid("signed longer than %d bytes", maxTemplateBytes)
	}
	for t != "" {
		i := strings.IndexAny(t, "{}")
		if i < 0 {
			c.parts = append(c.parts, part{kind: partLit, lit: []byte(t)})
			break
		}
		if i > 0 {
			c.parts = append(c.parts, part{kind: partLit, lit: []byte(t[:i])})
		}
		j := strings.IndexByte(t[i:], '}')
		if t[i] == '}' || j < 0 {
			return s.invalid("signed %q has an unbalanced brace", s.Signed)
		}
		name := t[i : i+j+1]
		k, ok := placeholders[name]
		if !ok {
			return s.invalid("signed %q: unknown placeholder %q (want {body}, {timestamp}, {id}, {url} or {form})", s.Signed, name)
		}
		if c.signs[k] {
			return s.invalid("signed %q repeats %s", s.Signed, name)
		}
		c.signs[k] = true
		c.parts = append(c.parts, part{kind: k})
		t = t[i+j+1:]
	}
	return nil
}

// SchemeVerifier verifies requests by a validated Scheme with its key. It is
// immutable, safe for concurrent use, and never prints its key.
type SchemeVerifier struct {
	c      *compiled
	key    []byte   // hmac key
	digest [32]byte // token, basic: SHA-256 of the expected value
}

var _ Verifier = (*SchemeVerifier)(nil)

// NewSchemeVerifier resolves s (a preset by Name), validates it and returns
// its verifier with secret. Errors wrap ErrInvalidScheme or
// ErrInvalidSecret, and never contain the secret.
func NewSchemeVerifier(s Scheme, secret string) (*SchemeVerifier, error) {
	c, err := compile(s)
	if err != nil {
		return nil, err
	}
	s = c.s // resolved
	name := s.label()
	if secret == "" {
		return nil, fmt.Errorf("%w: %s secret is empty", ErrInvalidSecret, name)
	}
	if len(secret) > maxSecretBytes {
		return nil, fmt.Errorf("%w: %s secret is longer than %d bytes", ErrInvalidSecret, name, maxSecretBytes)
	}
	key := []byte(secret)
	switch s.SecretEncoding {
	case SecretBase64, SecretWhsec:
		b64 := secret
		if s.SecretEncoding == SecretWhsec {
			b64 = strings.TrimPrefix(secret, standardSecretPrefix)
		}
		if b64 == "" {
			return nil, fmt.Errorf("%w: %s secret is empty", ErrInvalidSecret, name)
		}
		if key, err = base64.StdEncoding.DecodeString(b64); err != nil {
			key, err = base64.RawStdEncoding.DecodeString(b64)
		}
		if err != nil || len(key) == 0 {
			want := "base64"
			if s.SecretEncoding == SecretWhsec {
				want = "whsec_ followed by base64"
			}
			return nil, fmt.Errorf("%w: %s secret must be %s", ErrInvalidSecret, name, want)
		}
	}
	minLen := s.MinSecretBytes
	if minLen == 0 {
		minLen = DefaultMinSecretBytes
	}
	checked := key
	if s.Type == SchemeBasic {
		user, pass, ok := strings.Cut(string(key), ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("%w: %s secret must be user:password", ErrInvalidSecret, name)
		}
		checked = []byte(pass)
	}
	if len(checked) < minLen {
		// A short key can be guessed; name the length, never the key.
		return nil, fmt.Errorf("%w: %s secret must decode to at least %d bytes, got %d", ErrInvalidSecret, name, minLen, len(checked))
	}
	v := &SchemeVerifier{c: c}
	if s.Type == SchemeHMAC {
		v.key = key
	} else {
		v.digest = sha256.Sum256(key)
	}
	return v, nil
}

// Scheme returns (a copy of) the verifier's resolved scheme; it never holds
// the secret.
func (v *SchemeVerifier) Scheme() Scheme {
	s := v.c.s
	s.Fallback = s.Fallback.clone()
	return s
}

// CRCResponse answers a CRC challenge (Twitter-style): "sha256=" +
// base64(HMAC-SHA256(key, token)). ok is false unless the scheme is an
// hmac-sha256 one. The answer is an HMAC oracle over token: callers bound
// token (see ValidCRCToken) and refuse bodies a token could be.
func (v *SchemeVerifier) CRCResponse(token string) (string, bool) {
	if s := v.c.s; s.Type != SchemeHMAC || s.Algorithm != AlgHMACSHA256 || s.Signed != PartBody {
		return "", false
	}
	return "sha256=" + base64.StdEncoding.EncodeToString(macSHA256(v.key, []byte(token))), true
}

// CRCCapable reports whether a scheme (a preset by name is resolved
// first) can answer CRCs safely: a valid HMAC-SHA256 scheme of exactly the
// body (Twitter's), so that a CRC answer is a valid signature only of a
// body equal to the token, which such a source refuses (ValidCRCToken).
func CRCCapable(s Scheme) bool {
	c, err := compile(s)
	return err == nil && c.s.Type == SchemeHMAC && c.s.Algorithm == AlgHMACSHA256 && c.s.Signed == PartBody
}

// MaxCRCTokenBytes bounds a CRC token.
const MaxCRCTokenBytes = 256

// ValidCRCToken reports whether s can be a CRC token: 1..MaxCRCTokenBytes
// of base64 and base64url characters. A source answering CRCs refuses
// bodies of that form (a CRC answer for one would be a valid signature).
func ValidCRCToken(s string) bool {
	return names.Charset(s, MaxCRCTokenBytes, "+/=-_")
}

// Name returns the scheme's name (a preset's name, or its type).
func (v *SchemeVerifier) Name() string { return v.c.s.label() }

// String redacts the secret.
func (v *SchemeVerifier) String() string {
	return "webhook.SchemeVerifier{" + v.Name() + " secret:[redacted]}"
}

// GoString redacts the secret.
func (v *SchemeVerifier) GoString() string { return v.String() }

// MarshalText returns the verifier's name (never its secret), so that a
// configuration holding it marshals readably.
func (v *SchemeVerifier) MarshalText() ([]byte, error) { return []byte(v.Name()), nil }

// Verify checks a request with headers h and raw body body at time now.
// Every failure wraps ErrVerification.
func (v *SchemeVerifier) Verify(h http.Header, body []byte, now time.Time) (Verified, error) {
	switch v.c.s.Type {
	case SchemeHMAC:
		return v.verifyHMAC(h, body, now)
	case SchemeBasic:
		return v.verifyBasic(h)
	default:
		return v.verifyToken(h)
	}
}

// singleValue returns the one value of header name: missing when absent or
// empty, bad format when repeated, too large beyond MaxSignatureHeaderBytes.
func singleValue(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch {
	case len(vs) == 0 || vs[0] == "":
		return "", errMissingHeader
	case len(vs) > 1:
		return "", errBadFormat
	case len(vs[0]) > MaxSignatureHeaderBytes:
		return "", errTooLarge
	}
	return vs[0], nil
}

// equalMAC is the one comparison of a presented secret, signature or
// digest with the expected one: constant time (hmac.Equal). Every verifier
// compares through it; TestMACsCompareInConstantTime checks that nothing
// else in the package compares such bytes (no ==, bytes.Equal, ...).
func equalMAC(presented, want []byte) bool { return hmac.Equal(presented, want) }

// equalDigest compares SHA-256(presented) with want in constant time (the
// digest also hides the expected length).
func equalDigest(presented []byte, want [32]byte) bool {
	d := sha256.Sum256(presented)
	return equalMAC(d[:], want[:])
}

func (v *SchemeVerifier) idHeader(h http.Header) string {
	if v.c.s.IDHeader == "" {
		return ""
	}
	return h.Get(v.c.s.IDHeader)
}

func (v *SchemeVerifier) verifyToken(h http.Header) (Verified, error) {
	val, err := singleValue(h, v.c.s.Header)
	if err != nil {
		return Verified{}, err
	}
	tok, ok := strings.CutPrefix(val, v.c.s.Prefix)
	if !ok {
		return Verified{}, errNoSignature
	}
	if !equalDigest([]byte(tok), v.digest) {
		return Verified{}, errNoMatch
	}
	return Verified{MessageID: v.idHeader(h)}, nil
}

func (v *SchemeVerifier) verifyBasic(h http.Header) (Verified, error) {
	val, err := singleValue(h, "Authorization")
	if err != nil {
		return Verified{}, err
	}
	scheme, cred, ok := strings.Cut(val, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return Verified{}, errNoSignature
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimLeft(cred, " "))
	if err != nil {
		return Verified{}, errBadFormat
	}
	if !equalDigest(raw, v.digest) {
		return Verified{}, errNoMatch
	}
	return Verified{MessageID: v.idHeader(h)}, nil
}

// decodeSig decodes one signature; ok is false unless it is well formed and
// as long as the scheme's MAC.
func (c *compiled) decodeSig(s string) ([]byte, bool) {
	var (
		b   []byte
		err error
	)
	if c.s.Encoding == EncodingHex {
		b, err = hex.DecodeString(s)
	} else {
		b, err = base64.StdEncoding.DecodeString(s)
	}
	return b, err == nil && len(b) == c.macLen
}

// parsedSig is what a signature header yields.
type parsedSig struct {
	sigs [][]byte
	ts   string // kv: the timestamp item
}

// parseSignatures parses a signature header value by the scheme's format.
func (c *compiled) parseSignatures(v string) (parsedSig, error) {
	var p parsedSig
	if len(v) > MaxSignatureHeaderBytes {
		return p, errTooLarge
	}
	switch c.s.Format {
	case FormatSingle:
		enc, ok := strings.CutPrefix(v, c.s.Prefix)
		if !ok {
			return p, errNoSignature
		}
		sig, ok := c.decodeSig(enc)
		if !ok {
			return p, errBadFormat
		}
		p.sigs = [][]byte{sig}
	case FormatList:
		n := 0
		for entry := range strings.SplitSeq(v, c.s.Separator) {
			if entry = strings.TrimSpace(entry); entry == "" {
				continue
			}
			if n++; n > MaxSignatures {
				return p, errTooMany
			}
			if enc, ok := strings.CutPrefix(entry, c.s.Prefix); ok {
				if sig, ok := c.decodeSig(enc); ok {
					p.sigs = append(p.sigs, sig)
				}
			}
		}
		if len(p.sigs) == 0 {
			// Only other versions or malformed entries.
			return p, errNoSignature
		}
	case FormatKV:
		seenTS, n := false, 0
		for item := range strings.SplitSeq(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok {
				continue
			}
			switch {
			case k == c.s.TimestampKey && c.s.TimestampKey != "":
				if seenTS {
					return p, errBadFormat
				}
				p.ts, seenTS = val, true
				if val == "" {
					return p, errBadFormat
				}
			case k == c.s.SignatureKey:
				if n++; n > MaxSignatures {
					return p, errTooMany
				}
				if sig, ok := c.decodeSig(val); ok {
					p.sigs = append(p.sigs, sig)
				}
			}
		}
		if c.s.TimestampKey != "" && !seenTS {
			return p, errBadFormat
		}
		if n == 0 {
			return p, errNoSignature
		}
	}
	return p, nil
}

func (v *SchemeVerifier) verifyHMAC(h http.Header, body []byte, now time.Time) (Verified, error) {
	c := v.c
	sigH, tsH, idH := c.s.Header, c.s.TimestampHeader, c.s.IDHeader
	if fb := c.s.Fallback; fb != nil && len(h.Values(sigH)) == 0 && len(h.Values(fb.Header)) > 0 {
		sigH, tsH, idH = fb.Header, fb.TimestampHeader, fb.IDHeader
	}
	var (
		sigV string
		err  error
	)
	switch c.s.Format {
	case FormatSingle:
		sigV, err = singleValue(h, sigH)
	case FormatList:
		sigV, err = headerValue(h, sigH, c.s.Separator)
	default:
		sigV, err = headerValue(h, sigH, ",")
	}
	if err != nil {
		return Verified{}, err
	}
	var id, tsV string
	if c.signs[partID] {
		id = h.Get(idH)
	}
	if tsH != "" {
		tsV = h.Get(tsH)
	}
	if sigV == "" || c.signs[partID] && id == "" || tsH != "" && tsV == "" {
		return Verified{}, errMissingHeader
	}
	if len(id) > MaxSignatureHeaderBytes {
		return Verified{}, errTooLarge
	}
	var ts int64
	if tsH != "" {
		if ts, err = parseTimestamp(tsV); err != nil {
			return Verified{}, err
		}
	}
	p, err := c.parseSignatures(sigV)
	if err != nil {
		return Verified{}, err
	}
	if c.s.TimestampKey != "" {
		tsV = p.ts
		if ts, err = parseTimestamp(tsV); err != nil {
			return Verified{}, err
		}
	}
	if c.signs[partTimestamp] {
		if err := checkTolerance(ts, now, c.s.Tolerance); err != nil {
			return Verified{}, err
		}
	}
	m := hmac.New(c.newHash, v.key)
	for _, pt := range c.parts {
		switch pt.kind {
		case partLit:
			m.Write(pt.lit)
		case partBody:
			m.Write(body)
		case partTimestamp:
			// The canonical decimal form (as the built-in schemes always
			// signed it): leading zeros sent are not signed.
			m.Write([]byte(strconv.FormatInt(ts, 10)))
		case partID:
			m.Write([]byte(id))
		case partURL:
			m.Write([]byte(c.s.URL))
		case partForm:
			if err := writeForm(m, body); err != nil {
				return Verified{}, err
			}
		}
	}
	want := m.Sum(nil)
	matched := false
	for _, sig := range p.sigs {
		// No early exit: the time taken does not depend on which one matched.
		if equalMAC(sig, want) {
			matched = true
		}
	}
	if !matched {
		return Verified{}, errNoMatch
	}
	out := Verified{BodySigned: true} // compile requires {body} or {form}
	switch {
	case c.idPath != nil:
		out.MessageID, _ = jsonLookup(body, c.idPath)
	case c.signs[partID]:
		out.MessageID = id
	case idH != "":
		out.MessageID = h.Get(idH) // unsigned: only without a signed timestamp (see compile)
	}
	if c.signs[partTimestamp] {
		out.Timestamp, out.Tolerance = ts, c.s.Tolerance
		if out.MessageID == "" {
			// The signature covers the timestamp and the body, so an
			// exact replay carries the same one.
			out.MessageID = "sig:" + hex.EncodeToString(want)
		}
	}
	return out, nil
}

// writeForm writes the form body's parameters, names sorted and each name's
// values sorted, as name+value (PartForm).
func writeForm(w hash.Hash, body []byte) error {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return errBadFormat
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		vs := slices.Clone(vals[k])
		slices.Sort(vs)
		for _, v := range vs {
			w.Write([]byte(k))
			w.Write([]byte(v))
		}
	}
	return nil
}
