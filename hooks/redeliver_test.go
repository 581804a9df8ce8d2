package hooks_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/hooks"
)

// TestValidDeliverSubject: a rewind pushes only to the tenant's
// redelivery namespace, at most MaxDeliverTokens plain tokens below it.
func TestValidDeliverSubject(t *testing.T) {
	nine := "sluice.redeliver.acme" + strings.Repeat(".x", 9)
	for subj, want := range map[string]bool{
		"sluice.redeliver.acme":                           true,
		"sluice.redeliver.acme.billing":                   true,
		"sluice.redeliver.acme.billing.v2_b-c":            true,
		"sluice.redeliver.acme" + strings.Repeat(".x", 8): true,
		nine:                                                false,
		"sluice.redeliver.globex.x":                         false, // another tenant's
		"sluice.redeliver.acmex":                            false,
		"sluice.redeliver":                                  false,
		"sluice.hooks.acme.gh":                              false, // the stream's own subjects
		"sluice.v1.quota.hit":                               false, // sluice's service
		"sluice.v1.t.acme.quota.hit":                        false,
		"sluice.v1.events.settle":                           false,
		"$JS.API.STREAM.DELETE.HOOKS":                       false,
		"$KV.sluice_claims.acme.gh.k":                       false,
		"_INBOX.x":                                          false,
		"sluice.redeliver.acme.*":                           false,
		"sluice.redeliver.acme.>":                           false,
		"sluice.redeliver.acme..x":                          false,
		"sluice.redeliver.acme.x.":                          false,
		"sluice.redeliver.acme.x y":                         false,
		"sluice.redeliver.acme.é":                           false,
		"sluice.redeliver.acme.a=2Eb":                       false, // '=' only in the tenant's own token
		"other.redeliver.acme.x":                            false,
		"sluice.redeliver.acme." + strings.Repeat("x", 240): false, // over 255 bytes
	} {
		if got := hooks.ValidDeliverSubject("sluice", "acme", subj); got != want {
			t.Errorf("ValidDeliverSubject(%q) = %v, want %v", subj, got, want)
		}
	}
	// A tenant's token is encoded: "a.b" cannot reach tenant "a"'s "b".
	if !hooks.ValidDeliverSubject("sluice", "a.b", "sluice.redeliver.a=2Eb.x") || hooks.ValidDeliverSubject("sluice", "a", "sluice.redeliver.a=2Eb.x") ||
		hooks.ValidDeliverSubject("sluice", "a.b", "sluice.redeliver.a.b") {
		t.Error("tenant tokens")
	}
}
