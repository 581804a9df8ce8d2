package names

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/protocol"
)

func TestValidatePrefix(t *testing.T) {
	for p, ok := range map[string]bool{
		"sluice": true, "a.b-c_d": true, strings.Repeat("a", protocol.MaxPrefixBytes): true,
		"": false, strings.Repeat("a", protocol.MaxPrefixBytes+1): false, "a..b": false, ".a": false, "a.": false,
		"a b": false, "a.*": false, "a.>": false, "é": false,
	} {
		if err := protocol.ValidatePrefix(p); (err == nil) != ok {
			t.Errorf("ValidatePrefix(%q) = %v, want ok %v", p, err, ok)
		}
	}
}

func TestValidName(t *testing.T) {
	for s, ok := range map[string]bool{
		"acme": true, "a.b~c_d-e": true, strings.Repeat("a", MaxName): true, "...": true,
		"": false, ".": false, "..": false, strings.Repeat("a", MaxName+1): false,
		"a/b": false, "a b": false, "a%2F": false, "é": false,
	} {
		if got := ValidName(s); got != ok {
			t.Errorf("ValidName(%q) = %v, want %v", s, got, ok)
		}
	}
}
