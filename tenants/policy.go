package tenants

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/edge"
)

// Policy is the edge's view of every tenant: the YAML file's (swapped
// whole on SIGHUP) and the registry's records (swapped on every change).
//
// Which wins: a tenant the file lists is the file's, entirely — its
// record, if one exists, is ignored and the API refuses to write it (409
// managed_by_file). Every other tenant is the registry's. The file is per
// node and read at start and on SIGHUP; records are fleet-wide and live:
// letting one silently override the other per field would make a node's
// behaviour depend on which of two places was edited last. The file's
// defaults and allow_unknown apply to records too.
type Policy struct {
	cfg atomic.Pointer[config.Config]
	reg *Registry // nil: file only
}

// NewPolicy returns the policy of cfg and reg (nil: the file only).
func NewPolicy(cfg *config.Config, reg *Registry) *Policy {
	p := &Policy{reg: reg}
	p.cfg.Store(cfg)
	return p
}

// Config is the file's configuration in force.
func (p *Policy) Config() *config.Config { return p.cfg.Load() }

// SetConfig swaps the file's configuration (SIGHUP).
func (p *Policy) SetConfig(c *config.Config) { p.cfg.Store(c) }

// FileTenant reports whether tenant is managed by the file.
func (p *Policy) FileTenant(tenant string) bool {
	_, ok := p.cfg.Load().Tenants[tenant]
	return ok
}

func (p *Policy) record(tenant string) (*resolved, bool) {
	if p.reg == nil {
		return nil, false
	}
	s := p.reg.snap.Load()
	return s.tenants[tenant], len(s.tenants) > 0
}

// Source implements edge.Policy.
func (p *Policy) Source(tenant, source string) (edge.Source, error) {
	cfg := p.cfg.Load()
	if _, ok := cfg.Tenants[tenant]; ok {
		s, err := cfg.Source(tenant, source)
		if err != nil {
			return edge.Source{}, fmt.Errorf("%w: %w", edge.ErrUnknownSource, err)
		}
		return EdgeSource(s), nil
	}
	rt, listed := p.record(tenant)
	// The quickstart's "accept anything" ends as soon as tenants are
	// listed, in the file or as records.
	allow := cfg.AllowUnknown && !(cfg.OpenQuickstart && listed)
	if rt != nil {
		if rs, ok := rt.sources[source]; ok {
			if rs.unavailable != nil {
				return edge.Source{}, fmt.Errorf("%w: %s/%s: %w", edge.ErrSourceUnavailable, tenant, source, rs.unavailable)
			}
			return EdgeSource(rs.config(cfg, tenantLimits(rt, cfg))), nil
		}
		switch {
		case rt.rec.AllowUnknown != nil:
			allow = *rt.rec.AllowUnknown
		case rt.verified:
			allow = false
		}
	}
	if !allow {
		return edge.Source{}, fmt.Errorf("%w: %s/%s", edge.ErrUnknownSource, tenant, source)
	}
	return EdgeSource(config.Source{Dedupe: cfg.Defaults.Source.Dedupe, MaxBodyBytes: cfg.Defaults.Source.MaxBodyBytes}), nil
}

// Limits implements edge.LimitsFunc: the file's tenant's, a record's, or
// the defaults.
func (p *Policy) Limits(tenant string) (edge.Limits, string) {
	cfg := p.cfg.Load()
	if _, ok := cfg.Tenants[tenant]; !ok {
		if rt, _ := p.record(tenant); rt != nil && rt.rec.Limits != nil {
			return EdgeLimits(tenantLimits(rt, cfg)), string(config.OriginTenant)
		}
	}
	l, origin := cfg.Limits(tenant)
	return EdgeLimits(l), string(origin)
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

// EdgeSource adapts a source's configuration to edge.Source.
func EdgeSource(s config.Source) edge.Source {
	out := edge.Source{Dedupe: s.Dedupe.Lookup, MaxBodyBytes: s.MaxBodyBytes,
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
		l := EdgeLimits(*s.Limits)
		out.Limits = &l
	}
	if s.Verifier != nil {
		v := s.Verifier
		out.Verify = func(h http.Header, body []byte, now time.Time) (edge.Verified, error) {
			r, err := v.Verify(h, body, now)
			if err != nil {
				return edge.Verified{}, err
			}
			return edge.Verified{MessageID: r.MessageID, Timestamp: r.Timestamp, Tolerance: r.Tolerance, BodySigned: r.BodySigned}, nil
		}
	}
	return out
}

// EdgeLimits adapts limits to edge.Limits.
func EdgeLimits(l config.Limits) edge.Limits {
	return edge.Limits{
		Hooks: edge.Rate{Rate: l.Hooks.Rate, Burst: l.Hooks.Burst},
		Bytes: edge.Rate{Rate: l.Bytes.Rate, Burst: l.Bytes.Burst},
	}
}
