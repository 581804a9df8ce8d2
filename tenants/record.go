// Package tenants keeps the tenants and sources managed at run time through
// the admin API: one record per tenant in a KV bucket, followed by every
// node into an immutable snapshot swapped atomically on each change, with
// source secrets sealed under --secrets-key-file's keys (Keyring) and never
// returned (only a fingerprint). A tenant the YAML file lists is the file's
// only (see Policy). docs/DESIGN.md "Tenant records and snapshots".
package tenants

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/webhook"
)

// Bounds of a record.
const (
	// MaxTenants bounds the records (the tenants the API may create).
	MaxTenants = 100_000
	// MaxSources bounds the sources of one tenant.
	MaxSources = 64
	// MaxSecrets bounds the secrets of one source (a verification tries
	// each live one).
	MaxSecrets = 8
	// MaxSecretBytes bounds one secret.
	MaxSecretBytes = 1024
	// MaxParams bounds a verification scheme's parameters, MaxParamBytes
	// each name and value.
	MaxParams     = 32
	MaxParamBytes = 1024
	// MaxRecordBytes bounds a stored record (the bucket's value size).
	MaxRecordBytes = 512 << 10
)

// Tenant is a tenant's record: its settings and its sources.
type Tenant struct {
	Name string `json:"name"`
	// AllowUnknown decides for the tenant's unlisted sources (nil: as in
	// the file's rule, see config.Config.AllowsUnlisted).
	AllowUnknown *bool `json:"allow_unknown,omitempty"`
	// Limits are the tenant's own limits, completed from the defaults
	// (nil: the defaults).
	Limits *Limits `json:"limits,omitempty"`
	// Sources by name.
	Sources   map[string]*Source `json:"sources"`
	UpdatedAt time.Time          `json:"updated_at"`
	// Revision is the record's KV revision (set when read; not stored).
	Revision uint64 `json:"revision,omitempty"`
}

// Limits are partial limits: a rate left out is completed from the
// enclosing level (defaults, then tenant).
type Limits struct {
	Hooks *config.Rate `json:"hooks,omitempty"`
	Bytes *config.Rate `json:"bytes,omitempty"`
}

// Source is a source's record.
type Source struct {
	// Verify names the verification scheme (nil: unsigned).
	Verify *Verify `json:"verify,omitempty"`
	// Secrets are the scheme's secrets; a request verifies with any live
	// one (rotation overlaps).
	Secrets []Secret `json:"secrets,omitempty"`
	SourceSettings
}

// SourceSettings are a source's settings besides its verification: a
// source's record and a write of one (the admin API) share them.
type SourceSettings struct {
	// Dedupe is a dedupe spec ("": the default).
	Dedupe string `json:"dedupe,omitempty"`
	// MaxBodyBytes bounds the body (0: the default).
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// EventType says where the event type is (webhook.ParseEventType;
	// "": hooks are stored without a type token).
	EventType string `json:"event_type,omitempty"`
	// Handshake is the challenge the source answers without storing a
	// hook (config.HandshakeSlack, config.HandshakeCRC; "": none).
	Handshake string `json:"handshake,omitempty"`
	// Methods, ContentTypes and IPAllow are the source's request policy
	// (config.ParseAccess; nil: POST, any type, any address).
	Methods      []string `json:"methods,omitempty"`
	ContentTypes []string `json:"content_types,omitempty"`
	IPAllow      []string `json:"ip_allow,omitempty"`
	// Limits are the source's own budgets (nil: its tenant's).
	Limits *Limits `json:"limits,omitempty"`
}

// Verify is a verification scheme and its parameters: Scheme names a
// preset (webhook.Presets; Params override its fields, e.g. twilio's url)
// or a custom scheme's type (hmac, token, basic; Params give its fields).
// Params are the fields of docs/PROTOCOL.md "Declarative verification" as
// text (tolerance "5m", the fallback's as fallback.header, …).
type Verify struct {
	Scheme string            `json:"scheme"`
	Params map[string]string `json:"params,omitempty"`
}

// Secret is one secret of a source. Sealed holds it encrypted at rest and
// is never shown by the API.
type Secret struct {
	ID          string     `json:"id"`
	Fingerprint string     `json:"fingerprint"`
	CreatedAt   time.Time  `json:"created_at"`
	NotAfter    *time.Time `json:"not_after,omitempty"`
	Sealed      *Sealed    `json:"sealed,omitempty"`
}

// LiveAt reports whether the secret verifies at now (before its not-after).
func (s Secret) LiveAt(now time.Time) bool { return s.NotAfter == nil || now.Before(*s.NotAfter) }

// FieldError is a validation error naming the field, e.g.
// "sources.gh.verify.scheme".
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Validate checks a tenant record (secrets' sealed values are not opened
// here: see Keyring). Errors name the field.
func (t *Tenant) Validate() error {
	if !config.ValidName(t.Name) {
		return fieldErr("name", "invalid tenant name (want 1..%d bytes of [A-Za-z0-9._~-])", config.MaxNameBytes)
	}
	if err := t.Limits.validate("limits"); err != nil {
		return err
	}
	if len(t.Sources) > MaxSources {
		return fieldErr("sources", "at most %d sources per tenant", MaxSources)
	}
	for _, sn := range slices.Sorted(maps.Keys(t.Sources)) {
		if err := t.Sources[sn].validate(sn); err != nil {
			return err
		}
	}
	return nil
}

func (l *Limits) validate(field string) error {
	if l == nil {
		return nil
	}
	if l.Hooks == nil && l.Bytes == nil {
		return fieldErr(field, "give hooks and/or bytes")
	}
	for _, r := range []struct {
		name string
		r    *config.Rate
	}{{"hooks", l.Hooks}, {"bytes", l.Bytes}} {
		if r.r == nil {
			continue
		}
		if err := r.r.Validate(); err != nil {
			return fieldErr(field+"."+r.name, "%v", err)
		}
	}
	return nil
}

// complete returns base with the rates l sets.
func (l *Limits) complete(base config.Limits) config.Limits {
	if l == nil {
		return base
	}
	if l.Hooks != nil {
		base.Hooks = *l.Hooks
	}
	if l.Bytes != nil {
		base.Bytes = *l.Bytes
	}
	return base
}

func (s *Source) validate(name string) error {
	p := "sources." + name
	if !config.ValidName(name) {
		return fieldErr(p, "invalid source name (want 1..%d bytes of [A-Za-z0-9._~-])", config.MaxNameBytes)
	}
	if s == nil {
		return fieldErr(p, "must be an object")
	}
	if s.Dedupe != "" {
		if _, err := webhook.ParseDedupe(s.Dedupe); err != nil {
			return fieldErr(p+".dedupe", "%v", err)
		}
	}
	if s.MaxBodyBytes != 0 {
		if err := config.CheckBodyLimit(s.MaxBodyBytes); err != nil {
			return fieldErr(p+".max_body_bytes", "%v", err)
		}
	}
	if _, err := webhook.ParseEventType(s.EventType); err != nil {
		return fieldErr(p+".event_type", "%v", err)
	}
	if _, err := config.ParseAccess(s.Methods, s.ContentTypes, s.IPAllow); err != nil {
		var ae *config.AccessError
		if errors.As(err, &ae) {
			return fieldErr(p+"."+ae.Field, "%s", ae.Reason)
		}
		return fieldErr(p, "%v", err)
	}
	if err := s.Limits.validate(p + ".limits"); err != nil {
		return err
	}
	if err := s.Verify.validate(p + ".verify"); err != nil {
		return err
	}
	if s.Handshake != "" {
		var sc *webhook.Scheme
		if s.Verify != nil {
			v, _ := s.Verify.scheme(p + ".verify") // validated above
			sc = &v
		}
		if err := config.CheckHandshake(s.Handshake, sc); err != nil {
			return fieldErr(p+".handshake", "%v", err)
		}
	}
	switch {
	case s.Verify == nil && len(s.Secrets) > 0:
		return fieldErr(p+".secrets", "a secret needs verify")
	case s.Verify != nil && len(s.Secrets) == 0:
		return fieldErr(p+".secret", "verify %s needs a secret", s.Verify.Scheme)
	case len(s.Secrets) > MaxSecrets:
		return fieldErr(p+".secrets", "at most %d secrets per source (retire one first)", MaxSecrets)
	}
	seen := map[string]bool{}
	for i, sec := range s.Secrets {
		if !config.ValidName(sec.ID) || seen[sec.ID] {
			return fieldErr(fmt.Sprintf("%s.secrets[%d].id", p, i), "invalid or duplicate id %.64q", sec.ID)
		}
		seen[sec.ID] = true
	}
	return nil
}

func (v *Verify) validate(field string) error {
	if v == nil {
		return nil
	}
	_, err := v.scheme(field)
	return err
}

// scheme reads the record's scheme (see Verify) through config.SchemeOf,
// the file's reading. Errors name the field.
func (v *Verify) scheme(field string) (webhook.Scheme, error) {
	if !webhook.KnownScheme(v.Scheme) {
		return webhook.Scheme{}, fieldErr(field+".scheme", "unknown scheme %.64q (want one of %s, or hmac, token or basic)", v.Scheme, strings.Join(webhook.Presets(), ", "))
	}
	if len(v.Params) > MaxParams {
		return webhook.Scheme{}, fieldErr(field+".params", "at most %d parameters", MaxParams)
	}
	fields := make(map[string]string, len(v.Params)+1)
	for _, k := range slices.Sorted(maps.Keys(v.Params)) {
		if len(k) > MaxParamBytes || len(v.Params[k]) > MaxParamBytes {
			return webhook.Scheme{}, fieldErr(field+".params", "names and values of at most %d bytes", MaxParamBytes)
		}
		preset := !webhook.IsSchemeType(v.Scheme)
		if k == "type" || k == "name" && preset {
			return webhook.Scheme{}, fieldErr(field+".params."+k, "not a parameter (the scheme is %s)", v.Scheme)
		}
		fields[k] = v.Params[k]
	}
	if webhook.IsSchemeType(v.Scheme) {
		fields["type"] = v.Scheme
	} else {
		fields["name"] = v.Scheme
	}
	sc, err := config.SchemeOf(fields)
	if fe := (*webhook.SchemeFieldError)(nil); errors.As(err, &fe) {
		return webhook.Scheme{}, fieldErr(field+".params."+fe.Field, "%v", fe.Err)
	}
	if err != nil {
		return webhook.Scheme{}, fieldErr(field+".params", "%v", err)
	}
	return sc, nil
}

// nextSecretID returns "s<N>" with N one more than the largest such id.
func (s *Source) nextSecretID() string {
	n := 0
	for _, sec := range s.Secrets {
		if rest, ok := strings.CutPrefix(sec.ID, "s"); ok {
			if k, err := strconv.Atoi(rest); err == nil && k > n {
				n = k
			}
		}
	}
	return "s" + strconv.Itoa(n+1)
}

// clone returns a deep copy of t (records in a snapshot are never
// modified: every change works on a clone).
func (t *Tenant) clone() *Tenant {
	c := *t
	c.Limits = t.Limits.clone()
	if t.AllowUnknown != nil {
		b := *t.AllowUnknown
		c.AllowUnknown = &b
	}
	c.Sources = make(map[string]*Source, len(t.Sources))
	for n, s := range t.Sources {
		c.Sources[n] = s.clone()
	}
	return &c
}

func (l *Limits) clone() *Limits {
	if l == nil {
		return nil
	}
	c := Limits{}
	if l.Hooks != nil {
		h := *l.Hooks
		c.Hooks = &h
	}
	if l.Bytes != nil {
		b := *l.Bytes
		c.Bytes = &b
	}
	return &c
}

func (s *Source) clone() *Source {
	if s == nil {
		return nil
	}
	c := *s
	c.Limits = s.Limits.clone()
	if s.Verify != nil {
		v := Verify{Scheme: s.Verify.Scheme}
		if s.Verify.Params != nil {
			v.Params = make(map[string]string, len(s.Verify.Params))
			for k, val := range s.Verify.Params {
				v.Params[k] = val
			}
		}
		c.Verify = &v
	}
	c.Secrets = append([]Secret(nil), s.Secrets...)
	c.Methods = slices.Clone(s.Methods)
	c.ContentTypes = slices.Clone(s.ContentTypes)
	c.IPAllow = slices.Clone(s.IPAllow)
	return &c
}

// Redacted returns a copy of t without the sealed secrets (what the API
// shows).
func (t *Tenant) Redacted() *Tenant {
	c := t.clone()
	for _, s := range c.Sources {
		for i := range s.Secrets {
			s.Secrets[i].Sealed = nil
		}
	}
	return c
}

// UnmarshalJSON accepts a scheme object or, as a shorthand, its name:
// "github" = {"scheme":"github"}.
func (v *Verify) UnmarshalJSON(data []byte) error {
	var name string
	if err := json.Unmarshal(data, &name); err == nil {
		*v = Verify{Scheme: name}
		return nil
	}
	type plain Verify
	var p plain
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*v = Verify(p)
	return nil
}
