package tenants

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/httpapi"
)

// Policy is the edge's view of every tenant: the YAML file's (swapped
// whole on SIGHUP) and the registry's records (swapped on every change). A
// tenant the file lists is the file's entirely (its record is ignored, the
// API refuses to write it: 409 managed_by_file); a per-field merge would make
// a node's behaviour depend on which place was edited last. The file's
// defaults and allow_unknown apply to records too.
//
// Admission never widens by removing something (docs/SECURITY.md): once a
// record exists or has existed (Registry.Closed, durable) or a loaded file
// listed a tenant, unknown tenants are 404 unknown_source, also after the
// last one is removed. Only allow_unknown: true opens them.
type Policy struct {
	cfg atomic.Pointer[config.Config]
	reg *Registry // nil: file only
	// listed: a file loaded by this process listed a tenant.
	listed atomic.Bool
}

// NewPolicy returns the policy of cfg and reg (nil: the file only).
func NewPolicy(cfg *config.Config, reg *Registry) *Policy {
	p := &Policy{reg: reg}
	p.Reload(cfg)
	return p
}

// Config is the file's configuration in force.
func (p *Policy) Config() *config.Config { return p.cfg.Load() }

// Reload swaps the file's configuration (SIGHUP).
func (p *Policy) Reload(c *config.Config) {
	if len(c.Tenants) > 0 {
		p.listed.Store(true)
	}
	p.cfg.Store(c)
}

// Closed reports whether the quickstart's open admission has ended: a
// tenant record exists or existed, or a file listed a tenant.
func (p *Policy) Closed() bool {
	return p.listed.Load() || (p.reg != nil && p.reg.Closed())
}

// OpenToUnknown reports whether tenants nobody listed are accepted (with
// the defaults): allow_unknown: true in the file, or the quickstart
// before it closed.
func (p *Policy) OpenToUnknown() bool { return p.openToUnknown(p.cfg.Load()) }

func (p *Policy) openToUnknown(cfg *config.Config) bool {
	return cfg.AllowUnknown && !(cfg.OpenQuickstart && p.Closed())
}

// KnownTenant reports whether the node accepts hooks of tenant: the file
// lists it, it has a record, or tenants nobody listed are accepted
// (OpenToUnknown). httpapi.Config.KnownTenant.
func (p *Policy) KnownTenant(tenant string) bool {
	cfg := p.cfg.Load()
	if _, ok := cfg.Tenants[tenant]; ok {
		return true
	}
	return p.record(tenant) != nil || p.openToUnknown(cfg)
}

// FileTenant reports whether tenant is managed by the file.
func (p *Policy) FileTenant(tenant string) bool {
	_, ok := p.cfg.Load().Tenants[tenant]
	return ok
}

func (p *Policy) record(tenant string) *resolved {
	if p.reg == nil {
		return nil
	}
	return p.reg.lookup(tenant)
}

// Source implements httpapi.Policy.
func (p *Policy) Source(tenant, source string) (httpapi.Source, error) {
	cfg := p.cfg.Load()
	if _, ok := cfg.Tenants[tenant]; ok {
		s, err := cfg.Source(tenant, source)
		if err != nil {
			return httpapi.Source{}, fmt.Errorf("%w: %w", httpapi.ErrUnknownSource, err)
		}
		return HTTPSource(s), nil
	}
	rt := p.record(tenant)
	// The quickstart's "accept anything" ends as soon as tenants are
	// listed, in the file or as records, and never comes back.
	allow := p.openToUnknown(cfg)
	if rt != nil {
		if rs, ok := rt.sources[source]; ok {
			if rs.unavailable != nil {
				return httpapi.Source{}, fmt.Errorf("%w: %s/%s: %w", httpapi.ErrSourceUnavailable, tenant, source, rs.unavailable)
			}
			return HTTPSource(rs.config(cfg, tenantLimits(rt, cfg))), nil
		}
		switch {
		case rt.rec.AllowUnknown != nil:
			allow = *rt.rec.AllowUnknown
		case rt.verified:
			allow = false
		}
	}
	if !allow {
		return httpapi.Source{}, fmt.Errorf("%w: %s/%s", httpapi.ErrUnknownSource, tenant, source)
	}
	return HTTPSource(config.Source{Dedupe: cfg.Defaults.Source.Dedupe, MaxBodyBytes: cfg.Defaults.Source.MaxBodyBytes}), nil
}

// Limits implements httpapi.LimitsFunc: the file's tenant's, a record's, or
// the defaults.
func (p *Policy) Limits(tenant string) (httpapi.Limits, string) {
	cfg := p.cfg.Load()
	if _, ok := cfg.Tenants[tenant]; !ok {
		if rt := p.record(tenant); rt != nil && rt.rec.Limits != nil {
			return tenantLimits(rt, cfg), string(config.OriginTenant)
		}
	}
	l, origin := cfg.Limits(tenant)
	return l, string(origin)
}

func tenantLimits(rt *resolved, cfg *config.Config) config.Limits {
	return limitsOf(rt.rec.Limits, cfg.Defaults.Limits)
}

// config is the effective configuration of a record's source.
func (rs *resolvedSource) config(cfg *config.Config, tenant config.Limits) config.Source {
	s := config.Source{Dedupe: cfg.Defaults.Source.Dedupe, MaxBodyBytes: cfg.Defaults.Source.MaxBodyBytes, Configured: true, Verifier: rs.verifier, EventType: rs.event, Access: rs.access, Handshake: rs.shake}
	if rs.dedupe != nil {
		s.Dedupe = *rs.dedupe
	}
	if rs.maxBody > 0 {
		s.MaxBodyBytes = rs.maxBody
	}
	if rs.limits != nil {
		l := limitsOf(rs.limits, tenant)
		s.Limits = &l
	}
	return s
}

// HTTPSource adapts a source's configuration to httpapi.Source.
func HTTPSource(s config.Source) httpapi.Source {
	out := httpapi.Source{Dedupe: s.Dedupe.Lookup, MaxBodyBytes: s.MaxBodyBytes,
		Methods: s.Access.Methods, ContentTypes: s.Access.ContentTypes, IPAllow: s.Access.IPAllow}
	if s.EventType.IsSet() {
		out.EventType = s.EventType.Type
	}
	switch s.Handshake {
	case config.HandshakeSlack:
		out.URLVerification = true
	case config.HandshakeCRC:
		if c, ok := s.Verifier.(interface{ CRCResponse(string) (string, bool) }); ok {
			out.CRC = c.CRCResponse
		} else { // validated at load: never reached, but never answer unsigned
			out.CRC = func(string) (string, bool) { return "", false }
		}
	}
	if s.Limits != nil {
		l := *s.Limits
		out.Limits = &l
	}
	if s.Verifier != nil {
		v := s.Verifier
		out.Verify = func(h http.Header, body []byte, now time.Time) (httpapi.Verified, error) {
			r, err := v.Verify(h, body, now)
			if err != nil {
				return httpapi.Verified{}, err
			}
			return httpapi.Verified{MessageID: r.MessageID, Timestamp: r.Timestamp, Tolerance: r.Tolerance, BodySigned: r.BodySigned}, nil
		}
	}
	return out
}

// Register adds the policy's gauge to reg: sluice_admission_open is 1
// while tenants nobody listed are accepted.
func (p *Policy) Register(reg prometheus.Registerer) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_admission_open",
		Help: "1 while this node accepts tenants nobody listed (allow_unknown, or the quickstart before any tenant was listed), else 0.",
	}, func() float64 {
		if p.OpenToUnknown() {
			return 1
		}
		return 0
	}))
}
