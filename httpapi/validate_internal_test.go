package httpapi

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
)

// TestConfigsRefuseNegatives: a negative TTL, timeout or bound is
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
}
