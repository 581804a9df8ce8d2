package hooks_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/hooks"
)

// TestStreamConfigsRefuseNegatives: a negative replicas, size, window or
// shard of the hooks stream or the outbox is ErrInvalidConfig (never
// silently the default); a negative MaxAge is "forever".
func TestStreamConfigsRefuseNegatives(t *testing.T) {
	for name, c := range map[string]hooks.StreamConfig{
		"replicas": {Replicas: -1}, "max bytes": {MaxBytes: -1}, "duplicates": {Duplicates: -time.Second},
		"shard": {Shard: -1}, "shards": {Shards: -1},
	} {
		if _, err := hooks.EnsureStream(t.Context(), nil, c); !errors.Is(err, hooks.ErrInvalidConfig) {
			t.Errorf("stream %s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if err := (hooks.StreamConfig{MaxAge: -1}).Validate(); err != nil {
		t.Errorf("a negative MaxAge (forever): %v", err)
	}
	if _, err := hooks.EnsureOutbox(t.Context(), nil, hooks.OutboxConfig{MaxBytes: -1}); !errors.Is(err, hooks.ErrInvalidConfig) {
		t.Errorf("outbox max bytes: %v, want ErrInvalidConfig", err)
	}
}
