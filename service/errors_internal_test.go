package service

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/cooldown"
	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
)

// TestOneUnavailableSentinel: every package's unavailable error is
// protocol.ErrUnavailable (errors.Is), its text as before, and the service
// answers each, wrapped, 503 store_unavailable through that one sentinel
// (unavailableSentinels lists no package's own).
func TestOneUnavailableSentinel(t *testing.T) {
	for _, tc := range []struct {
		err  error
		text string
	}{
		{claims.ErrUnavailable, "claims: store unavailable"},
		{quota.ErrUnavailable, "quota: unavailable"},
		{cooldown.ErrUnavailable, "cooldown: store unavailable"},
		{kvstore.ErrUnavailable, "kvstore: store unavailable"},
		{durability.ErrSyncFailed, durability.ErrSyncFailed.Error()},
		{durability.ErrRoundMissed, durability.ErrRoundMissed.Error()},
		{client.ErrUnavailable, "client: service unavailable"},
	} {
		if tc.err.Error() != tc.text {
			t.Errorf("%q: text changed, want %q", tc.err, tc.text)
		}
		err := fmt.Errorf("settle acme/gh/k: %w", tc.err)
		if !errors.Is(err, protocol.ErrUnavailable) {
			t.Errorf("%q is not protocol.ErrUnavailable", tc.err)
		}
		if code, reason, outcome := classify(err); code != "503" || reason != protocol.StoreUnavailable.Code || outcome != outcomeUnavailable {
			t.Errorf("%q answered %s %s (%s), want 503 %s", tc.err, code, reason, outcome, protocol.StoreUnavailable.Code)
		}
	}
}
