package protocol

import "testing"

func TestSubjectAndName(t *testing.T) {
	if got := Subject("a.b", QuotaHit); got != "a.b.v1.quota.hit" {
		t.Errorf("Subject = %q", got)
	}
	if got := EndpointName(CooldownPenalize); got != "cooldown_penalize" {
		t.Errorf("Name = %q", got)
	}
}

func TestScoped(t *testing.T) {
	if got := ScopedSubject("a.b", "acme", QuotaHit); got != "a.b.v1.t.acme.quota.hit" {
		t.Errorf("ScopedSubject = %q", got)
	}
	if tok, ok := ScopedToken("a.b", "a.b.v1.t.acme.quota.hit"); !ok || tok != "acme" {
		t.Errorf("ScopedToken = %q %v", tok, ok)
	}
	for _, s := range []string{"a.b.v1.quota.hit", "a.b.v1.t.", "a.b.v1.t.acme", "x.v1.t.acme.quota.hit"} {
		if tok, ok := ScopedToken("a.b", s); ok {
			t.Errorf("ScopedToken(%q) = %q", s, tok)
		}
	}
	for _, e := range Scoped() {
		if e == QuotaReset {
			t.Error("quota.reset is scoped")
		}
	}
}
