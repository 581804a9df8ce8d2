package endpoints

import "testing"

func TestSubjectAndName(t *testing.T) {
	if got := Subject("a.b", QuotaHit); got != "a.b.v1.quota.hit" {
		t.Errorf("Subject = %q", got)
	}
	if got := Name(CooldownPenalize); got != "cooldown_penalize" {
		t.Errorf("Name = %q", got)
	}
}
