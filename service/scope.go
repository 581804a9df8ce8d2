package service

import (
	"strings"

	"github.com/sluice-dev/sluice/protocol"
)

// Tenant-scoped subjects (authz): every public endpoint but quota.reset is
// also served on <prefix>.v1.t.<tenant token>.<endpoint>, where the body
// must act for that tenant only. NATS subject permissions then confine a
// caller to its tenants; the unscoped subjects stay for nodes and
// operators.

// scopeTenants returns, per endpoint suffix, the tenants a body acts for
// (decoded leniently: the handler decodes and validates strictly after).
var scopeTenants = map[string]func(data []byte) ([]string, error){
	protocol.QuotaHit: func(data []byte) ([]string, error) {
		var r protocol.HitRequest
		if err := decodeStrict(data, &r); err != nil {
			return nil, err
		}
		var ts []string
		for _, c := range r.Charges {
			ts = append(ts, c.Tenant)
		}
		if r.Claim != nil {
			ts = append(ts, r.Claim.Tenant)
		}
		return ts, nil
	},
	protocol.QuotaReserve:  principal,
	protocol.QuotaRelease:  principal,
	protocol.QuotaCount:    principal,
	protocol.ClaimsSettle:  claimTenant,
	protocol.ClaimsRelease: claimTenant,
	protocol.ClaimsGet:     claimTenant,
	protocol.ReplayClaim: func(data []byte) ([]string, error) {
		var r struct {
			Namespace string `json:"namespace"`
		}
		if err := decodeStrict(data, &r); err != nil {
			return nil, err
		}
		// The edge's namespaces are "tenant/source".
		t, _, _ := strings.Cut(r.Namespace, "/")
		return []string{t}, nil
	},
	protocol.CooldownRecord:   account,
	protocol.CooldownPenalize: account,
	protocol.CooldownLoad:     account,
}

func principal(data []byte) ([]string, error) {
	var r protocol.CounterRequest
	if err := decodeStrict(data, &r); err != nil {
		return nil, err
	}
	return []string{r.Principal}, nil
}

func claimTenant(data []byte) ([]string, error) {
	var r protocol.ClaimsRequest
	if err := decodeStrict(data, &r); err != nil {
		return nil, err
	}
	return []string{r.Tenant}, nil
}

func account(data []byte) ([]string, error) {
	var r protocol.LoadRequest
	if err := decodeStrict(data, &r); err != nil {
		return nil, err
	}
	return []string{r.Account}, nil
}

// scoped returns the tenant-scoped twins of eps (same handler, subject
// protocol.ScopedSubject(prefix, "*", e), with the scope check).
func scoped(prefix string, eps []*endpoint) []*endpoint {
	byName := map[string]*endpoint{}
	for _, ep := range eps {
		byName[ep.name] = ep
	}
	var out []*endpoint
	for _, e := range protocol.Scoped() {
		ep, ok := byName[protocol.EndpointName(e)]
		if !ok {
			continue // a dependency not provided
		}
		tenants := scopeTenants[e]
		out = append(out, &endpoint{
			name: ep.name + "_t", subject: protocol.ScopedSubject(prefix, "*", e), timeout: ep.timeout, handle: ep.handle,
			scope: func(subject string, data []byte) error {
				tok, ok := protocol.ScopedToken(prefix, subject)
				if !ok {
					return invalid("subject %.128q has no tenant token", subject)
				}
				ts, err := tenants(data)
				if err != nil {
					return err
				}
				for _, t := range ts {
					if protocol.TenantToken(t) != tok {
						return invalid("tenant %.64q does not match the subject's tenant", t)
					}
				}
				return nil
			},
		})
	}
	return out
}
