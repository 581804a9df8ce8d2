package config

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"

	"github.com/sluice-dev/sluice/webhook"
)

// digest is a SHA-256 that prints as Redacted (it is of a secret).
type digest [32]byte

// Format writes Redacted for every verb.
func (digest) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, Redacted) }

// Changes compares c with the configuration it replaces on a reload
// (SIGHUP): applied lists what a reload changes at run time (allow_unknown,
// the defaults, each tenant added, removed or changed: "tenants.acme
// changed: sources.gh"), restart the process settings that differ but take
// effect only on a restart. Neither ever holds a secret.
func (c *Config) Changes(old *Config) (applied, restart []string) {
	if c.AllowUnknown != old.AllowUnknown || c.OpenQuickstart != old.OpenQuickstart {
		applied = append(applied, fmt.Sprintf("allow_unknown: %t -> %t", old.AllowUnknown, c.AllowUnknown))
	}
	if c.Defaults.Limits != old.Defaults.Limits {
		applied = append(applied, "defaults.limits")
	}
	if c.Defaults.Source.MaxBodyBytes != old.Defaults.Source.MaxBodyBytes || c.Defaults.Source.Dedupe.String() != old.Defaults.Source.Dedupe.String() {
		applied = append(applied, "defaults.source")
	}
	for _, tn := range sortedKeys(c.Tenants) {
		ot, ok := old.Tenants[tn]
		if !ok {
			applied = append(applied, "tenants."+tn+" added")
			continue
		}
		if what := tenantChanges(ot, c.Tenants[tn]); len(what) > 0 {
			applied = append(applied, fmt.Sprintf("tenants.%s changed: %v", tn, what))
		}
	}
	for _, tn := range sortedKeys(old.Tenants) {
		if _, ok := c.Tenants[tn]; !ok {
			applied = append(applied, "tenants."+tn+" removed")
		}
	}
	// Process settings: every other field of Config.
	a, b := reflect.ValueOf(old).Elem(), reflect.ValueOf(c).Elem()
	for i := 0; i < a.NumField(); i++ {
		f := a.Type().Field(i)
		switch f.Name {
		case "AllowUnknown", "OpenQuickstart", "Defaults", "Tenants", "bodyLimitSet",
			"SecretsKeyFile": // re-read on reload by cmd/edge
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			restart = append(restart, f.Name)
		}
	}
	return applied, restart
}

// tenantChanges names the parts of a tenant that differ.
func tenantChanges(a, b Tenant) []string {
	var out []string
	if !reflect.DeepEqual(a.Limits, b.Limits) {
		out = append(out, "limits")
	}
	if !reflect.DeepEqual(a.AllowUnknown, b.AllowUnknown) {
		out = append(out, "allow_unknown")
	}
	for _, sn := range sortedKeys(b.Sources) {
		sa, ok := a.Sources[sn]
		switch {
		case !ok:
			out = append(out, "sources."+sn+" added")
		case sourceSummary(sa) != sourceSummary(b.Sources[sn]):
			out = append(out, "sources."+sn)
		}
	}
	for _, sn := range sortedKeys(a.Sources) {
		if _, ok := b.Sources[sn]; !ok {
			out = append(out, "sources."+sn+" removed")
		}
	}
	return out
}

// sourceSummary is a comparable description of a source (its secret by
// digest, never printed).
func sourceSummary(s Source) any {
	type summary struct {
		dedupe, verify, eventType, access, handshake string
		secret                                       [32]byte
		maxBody                                      int64
		limits                                       Limits
		hasLimits                                    bool
	}
	out := summary{dedupe: s.Dedupe.String(), eventType: s.EventType.String(), access: s.Access.String(), handshake: s.Handshake, secret: s.secretSum, maxBody: s.MaxBodyBytes}
	if s.Verifier != nil {
		out.verify = s.Verifier.Name()
		if sv, ok := s.Verifier.(*webhook.SchemeVerifier); ok {
			// A custom scheme changed under the same name is a change.
			b, _ := json.Marshal(sv.Scheme())
			out.verify += " " + string(b)
		}
	}
	if s.Limits != nil {
		out.limits, out.hasLimits = *s.Limits, true
	}
	return out
}
