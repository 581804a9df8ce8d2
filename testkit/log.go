package testkit

import (
	"log/slog"
	"os"
)

// Log is the logger for a sluice application a test starts: discarded,
// or everything at debug level on stderr when the environment sets
// SLUICE_TEST_LOG (e.g. SLUICE_TEST_LOG=1 go test -v -run TestX ./edge/).
func Log() *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
