package httpapi

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
)

// TestConfigsRefuseNegatives: a negative TTL, timeout, bound or size is
// ErrInvalidConfig (never silently the default), and so is a missing
// dependency; zero keeps the default.
func TestConfigsRefuseNegatives(t *testing.T) {
	base := func() Config {
		return Config{
			Policy: struct{ Policy }{}, Limits: func(string) (Limits, string) { return Limits{}, "" },
			Admitter: struct{ Admitter }{}, Claims: struct{ claims.Store }{}, Hooks: struct{ HookStorer }{},
		}
	}
	ok := base()
	if err := ok.Validate(); err != nil {
		t.Fatalf("zero fields: %v", err)
	}
	for name, edit := range map[string]func(*Config){
		"no policy":       func(c *Config) { c.Policy = nil },
		"pending TTL":     func(c *Config) { c.PendingTTL = -time.Second },
		"dedupe TTL":      func(c *Config) { c.DedupeTTL = -time.Second },
		"store timeout":   func(c *Config) { c.StoreTimeout = -time.Second },
		"publish timeout": func(c *Config) { c.PublishTimeout = -time.Second },
		"max in flight":   func(c *Config) { c.MaxInFlight = -1 },
	} {
		c := base()
		edit(&c)
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	for name, c := range map[string]StreamConfig{
		"replicas": {Replicas: -1}, "max bytes": {MaxBytes: -1}, "duplicates": {Duplicates: -time.Second},
		"shard": {Shard: -1}, "shards": {Shards: -1},
	} {
		if _, err := EnsureStream(t.Context(), nil, c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("stream %s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if err := (StreamConfig{MaxAge: -1}).Validate(); err != nil {
		t.Errorf("a negative MaxAge (forever): %v", err)
	}
	if _, err := EnsureOutbox(t.Context(), nil, OutboxConfig{MaxBytes: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("outbox max bytes: %v, want ErrInvalidConfig", err)
	}
}
