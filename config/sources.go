package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/sluice-dev/sluice/authz"

	"github.com/sluice-dev/sluice/internal/limits"
	"github.com/sluice-dev/sluice/internal/names"
	"github.com/sluice-dev/sluice/webhook"
)

// ErrUnknownSource is returned by Config.Source for a tenant/source pair that
// the configuration does not allow (the edge answers 404 unknown_source).
var ErrUnknownSource = errors.New("config: unknown source")

// Built-in defaults of the file's defaults section (PROTOCOL.md).
const (
	DefaultHooksRate    = 100
	DefaultHooksBurst   = 200
	DefaultBytesRate    = 10485760 // 10 MiB/s
	DefaultBytesBurst   = 20971520 // 20 MiB
	DefaultMaxBodyBytes = 1048576  // 1 MiB
	// MaxBodyBytesLimit bounds max_body_bytes.
	MaxBodyBytesLimit = 1 << 30
	// MaxNameBytes bounds tenant and source names (the HTTP rule).
	MaxNameBytes = names.MaxName
)

// Rate is a GCRA budget: Rate units per second with bursts of up to Burst
// units; Rate.Validate is the one rule for a valid rate (internal/limits,
// shared with the edge, whose httpapi.Rate is the same type).
type Rate = limits.Rate

// Limits are a tenant's budgets: webhooks per second and body bytes per
// second (the same type as httpapi.Limits).
type Limits = limits.Limits

// Origin tells where a tenant's limits come from.
type Origin string

// Origins returned by Config.Limits. (The edge layers "override" on top for
// limits set through the admin API.)
const (
	OriginTenant  Origin = "tenant"
	OriginDefault Origin = "default"
)

// Defaults are the file's defaults section, completed with the built-in
// defaults.
type Defaults struct {
	// Limits apply to tenants without their own.
	Limits Limits
	// Source applies to sources the file does not list (when AllowUnknown),
	// and fills the fields a listed source leaves out.
	Source SourceDefaults
}

// SourceDefaults are the settings of unlisted sources.
type SourceDefaults struct {
	Dedupe       webhook.Dedupe
	MaxBodyBytes int64
}

// Tenant is one tenant of the file.
type Tenant struct {
	// Limits are the tenant's own limits, completed from Defaults.Limits;
	// nil when the tenant has none (it uses Defaults.Limits).
	Limits *Limits
	// Sources are the tenant's listed sources, by name.
	Sources map[string]Source
	// AllowUnknown is the tenant's own allow_unknown (nil: not set; see
	// Config.Source for the rule).
	AllowUnknown *bool
	// Verified is true when one of the tenant's listed sources verifies
	// signatures: its unlisted sources are then refused unless the tenant
	// itself says allow_unknown: true.
	Verified bool
}

// Source is the effective configuration of one tenant's source.
type Source struct {
	// Dedupe extracts the dedupe key.
	Dedupe webhook.Dedupe
	// Verifier checks signatures; nil means no verification.
	Verifier webhook.Verifier
	// MaxBodyBytes bounds the request body (413 beyond it).
	MaxBodyBytes int64
	// Configured is true for a source listed in the file, false for one
	// allowed by allow_unknown with the defaults.
	Configured bool
	// Handshake is the challenge the source answers without storing a
	// hook: "" (none), HandshakeSlack or HandshakeCRC.
	Handshake string
	// Access is the source's methods, content types and client addresses.
	Access Access
	// EventType says where the source's event type is (zero: not set,
	// hooks are stored without a type token).
	EventType webhook.EventType
	// Limits are the source's own budgets (completed from its tenant's
	// limits), charged instead of the tenant's: a source with its own
	// limits neither spends nor is starved by its tenant's budget. nil: the
	// source shares its tenant's budget.
	Limits *Limits

	secretSum digest // of the secret, to tell a changed one on reload (never printed)
}

// Source returns the effective configuration of tenant's source: the listed
// one, or the defaults when an unlisted source is allowed (see
// AllowsUnlisted); otherwise ErrUnknownSource. Names are not validated here
// (the edge answers 400 for invalid ones first; see ValidName).
func (c *Config) Source(tenant, source string) (Source, error) {
	t, listed := c.Tenants[tenant]
	if listed {
		if s, ok := t.Sources[source]; ok {
			return s, nil
		}
	}
	if !c.AllowsUnlisted(tenant) {
		return Source{}, fmt.Errorf("%w: %s/%s", ErrUnknownSource, tenant, source)
	}
	return Source{Dedupe: c.Defaults.Source.Dedupe, MaxBodyBytes: c.Defaults.Source.MaxBodyBytes}, nil
}

// AllowsUnlisted reports whether tenant accepts sources the file does not
// list. A listed tenant's own allow_unknown decides; else a listed tenant
// with a verifying source refuses them (an unsigned sibling must not spend
// or fill a verified source's tenant); else the top-level allow_unknown
// decides (false as soon as the file lists a tenant, unless set).
func (c *Config) AllowsUnlisted(tenant string) bool {
	if t, ok := c.Tenants[tenant]; ok {
		switch {
		case t.AllowUnknown != nil:
			return *t.AllowUnknown
		case t.Verified:
			return false
		}
	}
	return c.AllowUnknown
}

// LargestBody returns the largest max_body_bytes of the configuration, the
// field that sets it (defaults.source.max_body_bytes, or a listed source's)
// and whether the file sets it (false: the built-in default), to check it
// against the NATS max payload at start-up.
func (c *Config) LargestBody() (n int64, field string, explicit bool) {
	n, field, explicit = c.Defaults.Source.MaxBodyBytes, "defaults.source.max_body_bytes", c.bodyLimitSet
	for _, tn := range sortedKeys(c.Tenants) {
		t := c.Tenants[tn]
		for _, sn := range sortedKeys(t.Sources) {
			if m := t.Sources[sn].MaxBodyBytes; m > n {
				n, field, explicit = m, "tenants."+tn+".sources."+sn+".max_body_bytes", true
			}
		}
	}
	return n, field, explicit
}

// Limits returns tenant's configured limits and their origin: its own
// (OriginTenant) or the defaults (OriginDefault).
func (c *Config) Limits(tenant string) (Limits, Origin) {
	if t, ok := c.Tenants[tenant]; ok && t.Limits != nil {
		return *t.Limits, OriginTenant
	}
	return c.Defaults.Limits, OriginDefault
}

// ValidName reports whether s is a valid tenant or source name: 1..128 bytes
// of [A-Za-z0-9._~-] (the HTTP path rule), not "." or "..".
func ValidName(s string) bool { return names.ValidName(s) }

// resolveFile completes c from the file's structured part (nil: no file).
func (c *Config) resolveFile(f *fileConfig, getenv func(string) string) error {
	if f == nil {
		f = &fileConfig{}
	}
	// Without tenants (the quickstart) anything is accepted, on loopback
	// only (see check); once the file lists tenants, only they are.
	c.AllowUnknown = len(f.Tenants) == 0
	c.OpenQuickstart = c.AllowUnknown
	if f.AllowUnknown != nil {
		c.AllowUnknown = *f.AllowUnknown
		c.OpenQuickstart = false
	}
	c.Defaults = Defaults{
		Limits: Limits{
			Hooks: Rate{Rate: DefaultHooksRate, Burst: DefaultHooksBurst},
			Bytes: Rate{Rate: DefaultBytesRate, Burst: DefaultBytesBurst},
		},
		Source: SourceDefaults{Dedupe: webhook.MustParseDedupe(webhook.DedupeAuto), MaxBodyBytes: DefaultMaxBodyBytes},
	}
	if d := f.Defaults; d != nil {
		if d.Limits != nil {
			l, err := mergeLimits(c.Defaults.Limits, d.Limits, "defaults.limits")
			if err != nil {
				return err
			}
			c.Defaults.Limits = l
		}
		if s := d.Source; s != nil {
			if s.Dedupe != nil {
				dd, err := webhook.ParseDedupe(*s.Dedupe)
				if err != nil {
					return fmt.Errorf("config: defaults.source.dedupe: %w", err)
				}
				c.Defaults.Source.Dedupe = dd
			}
			if s.MaxBodyBytes != nil {
				if err := CheckBodyLimit(*s.MaxBodyBytes); err != nil {
					return fmt.Errorf("config: defaults.source.max_body_bytes: %w", err)
				}
				c.Defaults.Source.MaxBodyBytes = *s.MaxBodyBytes
				c.bodyLimitSet = true
			}
		}
	}
	if err := c.resolveNATSUsers(f.NATSUsers, getenv); err != nil {
		return err
	}
	c.Tenants = make(map[string]Tenant, len(f.Tenants))
	for _, tn := range sortedKeys(f.Tenants) {
		path := "tenants." + tn
		if !ValidName(tn) {
			return fmt.Errorf("config: %s: invalid tenant name (want 1..%d bytes of [A-Za-z0-9._~-])", path, MaxNameBytes)
		}
		ft := f.Tenants[tn]
		if ft == nil {
			ft = &fileTenant{}
		}
		t := Tenant{Sources: make(map[string]Source, len(ft.Sources)), AllowUnknown: ft.AllowUnknown}
		tl := c.Defaults.Limits
		if ft.Limits != nil {
			l, err := mergeLimits(c.Defaults.Limits, ft.Limits, path+".limits")
			if err != nil {
				return err
			}
			t.Limits, tl = &l, l
		}
		for _, sn := range sortedKeys(ft.Sources) {
			spath := path + ".sources." + sn
			if !ValidName(sn) {
				return fmt.Errorf("config: %s: invalid source name (want 1..%d bytes of [A-Za-z0-9._~-])", spath, MaxNameBytes)
			}
			s, err := c.resolveSource(ft.Sources[sn], spath, tl, getenv)
			if err != nil {
				return err
			}
			t.Sources[sn] = s
			t.Verified = t.Verified || s.Verifier != nil
		}
		c.Tenants[tn] = t
	}
	return nil
}

// resolveSource builds a listed source's effective configuration.
func (c *Config) resolveSource(fs *fileSource, path string, tenantLimits Limits, getenv func(string) string) (Source, error) {
	if fs == nil {
		fs = &fileSource{}
	}
	s := Source{Dedupe: c.Defaults.Source.Dedupe, MaxBodyBytes: c.Defaults.Source.MaxBodyBytes, Configured: true}
	if fs.Limits != nil {
		l, err := mergeLimits(tenantLimits, fs.Limits, path+".limits")
		if err != nil {
			return Source{}, err
		}
		s.Limits = &l
	}
	if fs.Dedupe != nil {
		d, err := webhook.ParseDedupe(*fs.Dedupe)
		if err != nil {
			return Source{}, fmt.Errorf("config: %s.dedupe: %w", path, err)
		}
		s.Dedupe = d
	}
	if fs.MaxBodyBytes != nil {
		if err := CheckBodyLimit(*fs.MaxBodyBytes); err != nil {
			return Source{}, fmt.Errorf("config: %s.max_body_bytes: %w", path, err)
		}
		s.MaxBodyBytes = *fs.MaxBodyBytes
	}
	a, err := ParseAccess(fs.Methods, fs.ContentTypes, fs.IPAllow)
	if err != nil {
		return Source{}, fmt.Errorf("config: %s.%w", path, err)
	}
	s.Access = a
	if fs.EventType != nil {
		e, err := webhook.ParseEventType(*fs.EventType)
		if err != nil {
			return Source{}, fmt.Errorf("config: %s.event_type: %w", path, err)
		}
		s.EventType = e
	}
	var scheme *webhook.Scheme
	if fs.Verify != nil {
		sc, err := SchemeOf(fs.Verify.Fields)
		if err != nil {
			return Source{}, fmt.Errorf("config: %s.verify: %w", path, err)
		}
		scheme = &sc
	}
	secret, hasSecret := "", fs.Secret != nil && *fs.Secret != ""
	if hasSecret {
		secret = *fs.Secret
	}
	if fs.SecretEnv != nil {
		name := *fs.SecretEnv
		if hasSecret {
			return Source{}, fmt.Errorf("config: %s: secret and secret_env are exclusive", path)
		}
		if !validEnvName(name) {
			return Source{}, fmt.Errorf("config: %s.secret_env: invalid environment variable name %q", path, name)
		}
		secret = getenv(name)
		if secret == "" {
			return Source{}, fmt.Errorf("config: %s.secret_env: environment variable %s is not set", path, name)
		}
		hasSecret = true
	}
	switch {
	case scheme == nil && hasSecret:
		return Source{}, fmt.Errorf("config: %s: a secret needs verify (%s)", path, schemeNames())
	case scheme != nil && !hasSecret:
		return Source{}, fmt.Errorf("config: %s: verify %s needs secret or secret_env", path, schemeLabel(*scheme))
	case scheme != nil:
		v, err := webhook.NewSchemeVerifier(*scheme, secret)
		if err != nil { // never contains the secret
			field := ".secret"
			switch {
			case !errors.Is(err, webhook.ErrInvalidSecret):
				field = ".verify"
			case fs.SecretEnv != nil:
				field = ".secret_env"
			}
			return Source{}, fmt.Errorf("config: %s%s: %w", path, field, err)
		}
		s.Verifier = v
		s.secretSum = digest(sha256.Sum256([]byte(secret)))
	}
	if fs.Handshake != nil {
		var resolved *webhook.Scheme
		if sv, ok := s.Verifier.(*webhook.SchemeVerifier); ok {
			r := sv.Scheme()
			resolved = &r
		}
		if err := CheckHandshake(*fs.Handshake, resolved); err != nil {
			return Source{}, fmt.Errorf("config: %s.handshake: %w", path, err)
		}
		s.Handshake = *fs.Handshake
	}
	return s, nil
}

// SchemeOf reads a source's verify given as fields (webhook.SchemeFromFields):
// {"name": <preset>} alone is the preset; a name that is neither a preset nor
// given with a type is an error that lists the accepted names. The scheme
// is validated (webhook.ErrInvalidScheme).
func SchemeOf(fields map[string]string) (webhook.Scheme, error) {
	s, err := webhook.SchemeFromFields(fields)
	if err != nil {
		return webhook.Scheme{}, err
	}
	if s.Type == "" && s.Name != "" && !webhook.KnownScheme(s.Name) {
		return webhook.Scheme{}, fmt.Errorf("unknown verifier %.64q (want %s)", s.Name, schemeNames())
	}
	if err := s.Validate(); err != nil {
		return webhook.Scheme{}, err
	}
	return s, nil
}

// schemeNames lists what a verify may name: the presets, or a custom scheme.
func schemeNames() string {
	return "one of " + strings.Join(webhook.Presets(), ", ") + ", or a custom scheme with type hmac, token or basic"
}

func schemeLabel(s webhook.Scheme) string {
	if s.Name != "" {
		return s.Name
	}
	return s.Type
}

// mergeLimits completes f with base and validates the result.
func mergeLimits(base Limits, f *fileLimits, path string) (Limits, error) {
	out := base
	for _, r := range []struct {
		name string
		f    *fileRate
		dst  *Rate
	}{{"hooks", f.Hooks, &out.Hooks}, {"bytes", f.Bytes, &out.Bytes}} {
		if r.f == nil {
			continue
		}
		if r.f.Rate != nil {
			r.dst.Rate = *r.f.Rate
		}
		if r.f.Burst != nil {
			r.dst.Burst = *r.f.Burst
		}
		if err := r.dst.Validate(); err != nil {
			return Limits{}, fmt.Errorf("config: %s.%s: %w", path, r.name, err)
		}
	}
	return out, nil
}

// CheckBodyLimit checks a max_body_bytes value: 1..MaxBodyBytesLimit.
func CheckBodyLimit(n int64) error {
	if n < 1 || n > MaxBodyBytesLimit {
		return fmt.Errorf("must be 1..%d, got %d", MaxBodyBytesLimit, n)
	}
	return nil
}

// validEnvName reports whether s is a portable environment variable name:
// [A-Za-z_][A-Za-z0-9_]*.
func validEnvName(s string) bool {
	return names.Charset(s, 256, "_") && !('0' <= s[0] && s[0] <= '9')
}

// resolveNATSUsers checks nats_users: a role of authz.Roles, tenants (valid
// names) exactly for service and consumer, and one credential — password
// (at least MinAdminTokenBytes bytes), password_env or nkey (a public user
// nkey).
func (c *Config) resolveNATSUsers(users map[string]*fileNATSUser, getenv func(string) string) error {
	if len(users) > 0 && c.NATSURL != "" {
		return errors.New("config: nats_users: only for the embedded server; for --nats-url print the server's authorization with `edge nats-authz`")
	}
	if len(users) > 0 && c.NATSFile.opts().Authorization != "" {
		return fmt.Errorf("config: nats_users: not with the token of --nats-config %s (nats-server takes users or a token)", c.NATSFile.Path())
	}
	for _, name := range sortedKeys(users) {
		path := "nats_users." + name
		fu := users[name]
		if fu == nil {
			fu = &fileNATSUser{}
		}
		u := NATSUser{Name: name, Tenants: fu.Tenants}
		if fu.Role != nil {
			u.Role = *fu.Role
		}
		for _, t := range u.Tenants {
			if !ValidName(t) {
				return fmt.Errorf("config: %s.tenants: invalid tenant name %.64q", path, t)
			}
		}
		if _, err := authz.ForShards(u.Role, name, c.Prefix, c.HooksStream, c.Shards, u.Tenants); err != nil {
			return fmt.Errorf("config: %s: %w", path, err)
		}
		n := 0
		if fu.Password != nil {
			n++
			u.Password, u.PlainInFile = NewSecret(*fu.Password), true
		}
		if fu.PasswordEnv != nil {
			n++
			if !validEnvName(*fu.PasswordEnv) || getenv(*fu.PasswordEnv) == "" {
				return fmt.Errorf("config: %s.password_env: environment variable %.64q is not set", path, *fu.PasswordEnv)
			}
			u.Password = NewSecret(getenv(*fu.PasswordEnv))
		}
		if fu.NKey != nil {
			n++
			if !nkeys.IsValidPublicUserKey(*fu.NKey) {
				return fmt.Errorf("config: %s.nkey: not a public user nkey (U…; `nk -gen user -pubout`)", path)
			}
			u.NKey = *fu.NKey
		}
		switch {
		case n != 1:
			return fmt.Errorf("config: %s: give exactly one of password, password_env and nkey", path)
		case u.NKey == "" && len(u.Password.Reveal()) < MinAdminTokenBytes:
			return fmt.Errorf("config: %s: password must be at least %d bytes", path, MinAdminTokenBytes)
		}
		c.NATSUsers = append(c.NATSUsers, u)
	}
	return nil
}
