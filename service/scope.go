package service

import (
	"strings"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/cooldown"
	"github.com/sluice-dev/sluice/quota"
)

// Tenant-scoped subjects (authz): every public endpoint but quota.reset is
// also served on <prefix>.v1.t.<tenant token>.<endpoint>, where the body
// must act for that tenant only. NATS subject permissions then confine a
// caller to its tenants; the unscoped subjects stay for nodes and
// operators.

// scopeTenants returns, per endpoint suffix, the tenants a body acts for
// (decoded leniently: the handler decodes and validates strictly after).
var scopeTenants = map[string]func(data []byte) ([]string, error){
	"quota.hit": func(data []byte) ([]string, error) {
		var r quota.HitRequest
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
	"quota.reserve":  principal,
	"quota.release":  principal,
	"quota.count":    principal,
	"claims.settle":  claimTenant,
	"claims.release": claimTenant,
	"claims.get":     claimTenant,
	"replay.claim": func(data []byte) ([]string, error) {
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
	"cooldown.record":   account,
	"cooldown.penalize": account,
	"cooldown.load":     account,
}

func principal(data []byte) ([]string, error) {
	var r quota.CounterRequest
	if err := decodeStrict(data, &r); err != nil {
		return nil, err
	}
	return []string{r.Principal}, nil
}

func claimTenant(data []byte) ([]string, error) {
	var r claimRequest
	if err := decodeStrict(data, &r); err != nil {
		return nil, err
	}
	return []string{r.Tenant}, nil
}

func account(data []byte) ([]string, error) {
	var r cooldown.LoadRequest
	if err := decodeStrict(data, &r); err != nil {
		return nil, err
	}
	return []string{r.Account}, nil
}

// scoped returns the tenant-scoped twins of eps (same handler, subject
// <prefix>.v1.t.*.<suffix>, with the scope check).
func scoped(prefix string, eps []*endpoint) []*endpoint {
	base := prefix + ".v1."
	var out []*endpoint
	for _, ep := range eps {
		suffix := strings.TrimPrefix(ep.subject, base)
		tenants, ok := scopeTenants[suffix]
		if !ok {
			continue // quota.reset: operators only
		}
		tokenAt := len(strings.Split(base+"t", "."))
		out = append(out, &endpoint{
			name: ep.name + "_t", subject: base + "t.*." + suffix, timeout: ep.timeout, handle: ep.handle,
			scope: func(subject string, data []byte) error {
				parts := strings.Split(subject, ".")
				if len(parts) <= tokenAt {
					return invalid("subject %q has no tenant token", subject)
				}
				ts, err := tenants(data)
				if err != nil {
					return err
				}
				for _, t := range ts {
					if authz.TenantToken(t) != parts[tokenAt] {
						return invalid("tenant %.64q does not match the subject's tenant", t)
					}
				}
				return nil
			},
		})
	}
	return out
}
