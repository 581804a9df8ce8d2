package events_test

import (
	"testing"

	"github.com/sluice-dev/sluice/events"
)

func TestStreamName(t *testing.T) {
	if got := events.StreamName("sluice"); got != "sluice_events" {
		t.Fatalf("StreamName = %q", got)
	}
	if got := events.StreamName("acme.prod"); got != "acme_prod_events" {
		t.Fatalf("StreamName(acme.prod) = %q", got)
	}
}
