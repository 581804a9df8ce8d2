package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// TestOneUnavailableSentinel: every package's unavailable error wraps
// protocol.ErrUnavailable (errors.Is), its text names the package, and
// the service answers each, wrapped, 503 store_unavailable through that
// one sentinel (unavailableSentinels lists no package's own).
func TestOneUnavailableSentinel(t *testing.T) {
	for _, tc := range []struct {
		err  error
		text string
	}{
		{kvstore.MapError(context.DeadlineExceeded), "kvstore: store unavailable: "},
		{&client.ServiceError{Subject: "sluice.v1.quota.reserve", Code: 503}, "client: service unavailable: "},
		{kvstore.ErrSyncFailed, "kvstore: store unavailable: "},
		{kvstore.ErrRoundMissed, "kvstore: store unavailable: "},
	} {
		if !strings.HasPrefix(tc.err.Error(), tc.text) {
			t.Errorf("%q: text changed, want it to start %q", tc.err, tc.text)
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
